"""Handler patterns: the handlers an app may name in its jobs, set by an operator.

An app has either no restriction (every handler, the default) or a list of glob-style
patterns (``fnmatch.fnmatchcase``: ``*`` any run of characters, ``?`` one character,
anything else itself, case counting); a handler any of them matches is allowed. The
characters a pattern may hold leave out fnmatch's ``[...]`` classes and anything a shell
or a terminal would read otherwise.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

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
    """The handlers an app may name: those ``patterns`` match, or every one (None)."""

    patterns: tuple[str, ...] | None = None

    def allows(self, handler: str) -> bool:
        """Whether a job of this app may name ``handler``: whether any pattern matches it
        as ``fnmatch.fnmatchcase`` does."""
        return self._matcher is None or self._matcher.match(handler) is not None

    @cached_property
    def _matcher(self) -> re.Pattern[str] | None:
        # One expression for all the patterns, not one fnmatchcase call per pattern.
        if self.patterns is None:
            return None
        if not self.patterns:
            return re.compile(r"(?!)")  # matches nothing
        return re.compile("|".join(fnmatch.translate(p) for p in self.patterns))

    def shown(self) -> str:
        """The patterns as a message quotes them: ``'report.*', 'billing.export'``."""
        if self.patterns is None:
            return "every handler"
        quoted = ", ".join(_quoted(p) for p in self.patterns[:_SHOWN]) or "none"
        more = len(self.patterns) - _SHOWN
        return f"{quoted} and {more} more" if more > 0 else quoted

    def stored(self) -> str | None:
        """The text kept in ``apps.handler_patterns``: a JSON array, or NULL for every
        handler."""
        return None if self.patterns is None else json.dumps(list(self.patterns))

    @staticmethod
    def from_stored(text: str | None) -> HandlerPatterns:
        """The patterns ``stored`` wrote. Text that is no JSON array of strings allows
        nothing: a restriction that cannot be read must not become none."""
        if text is None:
            return EVERY_HANDLER
        try:
            value = json.loads(text)
        except ValueError:
            return HandlerPatterns(())
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            return HandlerPatterns(())
        return HandlerPatterns(tuple(value))


EVERY_HANDLER = HandlerPatterns()
