"""Cron expressions: 5 fields (minute first) or 6 fields (seconds first, as Quartz/Spring).

``*/2 * * * * *`` means every two seconds. Times are epoch milliseconds, in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import croniter

from common.errors import ValidationFailedError


def _is_seconds_first(expr: str) -> bool:
    return len(expr.split()) == 6


def validate_cron(expr: str) -> str:
    """Return the expression normalised, or raise ``ValidationFailedError`` saying why."""
    normalised = " ".join(expr.split())
    fields = len(normalised.split())
    if fields not in (5, 6):
        raise ValidationFailedError(
            "cronExpr",
            f"{expr!r} has {fields} fields; use 5 (min hour day month weekday) "
            "or 6 (sec min hour day month weekday)",
        )
    try:
        next_trigger_ms(normalised, 0)
    except (ValueError, KeyError) as e:
        raise ValidationFailedError("cronExpr", f"{expr!r} is not a valid cron: {e}") from e
    return normalised


def next_trigger_ms(expr: str, after_ms: int) -> int:
    """The first time the expression fires strictly after ``after_ms``."""
    start = datetime.fromtimestamp(after_ms / 1000, tz=UTC)
    iterator = croniter(expr, start, second_at_beginning=_is_seconds_first(expr))
    return int(iterator.get_next(float) * 1000)
