"""The W3C ``traceparent`` header: read, checked and derived (trace-context level 1).

Kairos keeps a job's traceparent and hands it on at each stage; it never fails a request
over one: an invalid header is ignored, as the W3C spec asks of a receiver.
"""

from __future__ import annotations

import re
import secrets

HEADER = "traceparent"
# version 00, 32-hex trace id, 16-hex parent id, 2-hex flags; lower-case only.
_SHAPE = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16
# The stored and carried length: "00-" + 32 + "-" + 16 + "-" + 2.
LENGTH = 55


def parse_traceparent(value: str | None) -> str | None:
    """``value`` when it is a valid version-00 traceparent, else None (ignored).

    Surrounding blanks are dropped (header values may carry them); an all-zero trace or
    parent id, upper-case hex or another version is invalid.
    """
    if value is None:
        return None
    text = value.strip()
    match = _SHAPE.fullmatch(text)
    if match is None or match.group(1) == _ZERO_TRACE or match.group(2) == _ZERO_PARENT:
        return None
    return text


def trace_id(traceparent: str) -> str:
    """The 32-hex trace id of a valid traceparent."""
    return traceparent[3:35]


def parent_id(traceparent: str) -> str:
    """The 16-hex parent (span) id of a valid traceparent."""
    return traceparent[36:52]


def with_parent(traceparent: str, parent: str) -> str:
    """The same trace and flags under another parent id."""
    return f"{traceparent[:36]}{parent}{traceparent[52:]}"


def fresh_parent(traceparent: str) -> str:
    """The same trace and flags under a new random parent id: a run of a recurring job
    is its own branch of the job's trace."""
    parent = secrets.token_hex(8)
    while parent == _ZERO_PARENT:  # pragma: no cover - one chance in 2**64
        parent = secrets.token_hex(8)
    return with_parent(traceparent, parent)
