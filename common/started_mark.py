"""What a worker's started key holds: which worker took the execution, then how it ended.

The key is set (NX) when a worker admits a delivery, to its worker id. Once the run
has ended and before its result is published, the worker appends the result as JSON
after a newline. A copy of the delivery that comes back later (the broker connection
dropped before the ack) is then reported with the outcome the run really had, instead
of as LOST; so is a run whose worker died between finishing and publishing.
"""

from __future__ import annotations

SEPARATOR = "\n"


def parse_started(value: bytes | str | None) -> tuple[str | None, str | None]:
    """The owner's worker id and the stored result JSON (None when not known yet)."""
    if value is None:
        return None, None
    text = value.decode() if isinstance(value, bytes) else value
    owner, found, outcome = text.partition(SEPARATOR)
    return owner, (outcome if found else None)


# Owners that are not workers: an execution fenced by the reconciler or an operator is
# being settled without a run; a worker that finds one of these drops its copy.
RECONCILER = "reconciler"
OPERATOR = "operator"
FENCES = frozenset({RECONCILER, OPERATOR})
