"""Handler patterns: the handlers an app may name in its jobs, set by an operator.

An app has a list of glob-style patterns (``fnmatch.fnmatchcase``: ``*`` any run of
characters, ``?`` one character, anything else itself, case counting); a handler any of
them matches is allowed. An app without patterns (NULL or an empty list) may name no
handler: access is granted, never assumed (``kairos app create APP --handlers ...``,
``kairos app handlers APP --allow ...``); ``*`` grants every handler. The characters a
pattern may hold leave out fnmatch's ``[...]`` classes and anything a shell or a
terminal would read otherwise.

``handler_admitted`` is the one rule every stage asks (the API at submission, the
dispatcher before it runs a stored job).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

from common.errors import ValidationFailedError

MAX_PATTERNS = 50
# As long as the longest handler name a job may carry (``jobHandler``).
MAX_PATTERN_LENGTH = 200
_PATTERN = re.compile(r"[A-Za-z0-9._:/*?-]+")
_SAYS_CHARACTERS = (
    "a pattern may hold only ASCII letters, digits, '.', '_', '-', ':', '/' and the "
    "wildcards '*' (any run of characters) and '?' (one character)"
)
# How many patterns an error message quotes before it says how many more there are.
_SHOWN = 10


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is no handler pattern (a phrase following the quoted pattern), or
    None when it is one."""
    if not pattern:
        return "is empty; give a handler name or a pattern such as 'report.*'"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"is {len(pattern)} characters long; a pattern has at most {MAX_PATTERN_LENGTH}"
    if _PATTERN.fullmatch(pattern) is None:
        bad = next(c for c in pattern if _PATTERN.fullmatch(c) is None)
        return f"holds {bad!r}; {_SAYS_CHARACTERS}"
    return None


def checked_patterns(patterns: Sequence[str], field: str) -> tuple[str, ...]:
    """``patterns`` validated, repeats dropped, in their order; a ``ValidationFailedError``
    naming ``field`` (the flag or setting they came from) for the first bad one."""
    if not patterns:
        raise ValidationFailedError(field, "give at least one pattern")
    if len(patterns) > MAX_PATTERNS:
        raise ValidationFailedError(
            field, f"{len(patterns)} patterns given; an app may have at most {MAX_PATTERNS}"
        )
    for pattern in patterns:
        problem = pattern_problem(pattern)
        if problem is not None:
            raise ValidationFailedError(field, f"{_quoted(pattern)} {problem}")
    return tuple(dict.fromkeys(patterns))


def _quoted(pattern: str) -> str:
    text = repr(pattern)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class HandlerPatterns:
    """The handlers an app may name: those ``patterns`` match (none when empty)."""

    patterns: tuple[str, ...] = ()

    def allows(self, handler: str) -> bool:
        """Whether a job of this app may name ``handler``: whether any pattern matches it
        as ``fnmatch.fnmatchcase`` does."""
        return self._matcher.match(handler) is not None

    @cached_property
    def _matcher(self) -> re.Pattern[str]:
        # One expression for all the patterns, not one fnmatchcase call per pattern.
        if not self.patterns:
            return re.compile(r"(?!)")  # matches nothing
        return re.compile("|".join(fnmatch.translate(p) for p in self.patterns))

    @property
    def granted(self) -> bool:
        """Whether the app may name any handler at all."""
        return bool(self.patterns)

    def shown(self) -> str:
        """The patterns as a message quotes them: ``'report.*', 'billing.export'``."""
        quoted = ", ".join(_quoted(p) for p in self.patterns[:_SHOWN]) or "none"
        more = len(self.patterns) - _SHOWN
        return f"{quoted} and {more} more" if more > 0 else quoted

    def stored(self) -> str:
        """The text kept in ``apps.handler_patterns``: a JSON array."""
        return json.dumps(list(self.patterns))

    @staticmethod
    def from_stored(text: str | None) -> HandlerPatterns:
        """The patterns ``stored`` wrote. NULL, and text that is no JSON array of
        strings, allow nothing: access that cannot be read must not become every
        handler."""
        return _from_stored(text)


@lru_cache(maxsize=4096)
def _from_stored(text: str | None) -> HandlerPatterns:
    # Cached: apps are few and their patterns change rarely, and each read compiles.
    if text is None:
        return NO_HANDLER
    try:
        value = json.loads(text)
    except ValueError:
        return NO_HANDLER
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        return NO_HANDLER
    return HandlerPatterns(tuple(value))


def handler_admitted(stored: str | None, handler: str) -> bool:
    """Whether an app whose ``apps.handler_patterns`` holds ``stored`` may run
    ``handler``: the rule the API applies at submission and the dispatcher at dispatch."""
    return _from_stored(stored).allows(handler)


NO_HANDLER = HandlerPatterns(())
"""An app granted no handler: what NULL, an empty list and unreadable text mean."""

EVERY_HANDLER = HandlerPatterns(("*",))
"""An app granted every handler, explicitly (``kairos app handlers APP --all``)."""
