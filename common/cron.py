"""Cron expressions: 5 fields (minute first) or 6 fields (seconds first, as Quartz/Spring).

``*/2 * * * * *`` means every two seconds. Times are epoch milliseconds; expressions are
read in an IANA time zone (UTC by default) with these daylight-saving rules:

- a wall time that does not exist (the clock jumps forward over it) fires once, shifted
  by the gap (02:30 on a day that skips 02:00-03:00 fires at 03:30), unless the
  expression fires every hour anyway, in which case the missing times are just skipped;
- a wall time that happens twice (the clock falls back) fires once, at its first
  occurrence, unless the expression fires every hour, in which case it fires in both.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from common.errors import ValidationFailedError

_SEARCH_LIMIT = 5_000


def _fields(expr: str) -> list[str]:
    return expr.split()


def _is_seconds_first(expr: str) -> bool:
    return len(_fields(expr)) == 6


def _fires_every_hour(expr: str) -> bool:
    fields = _fields(expr)
    return fields[2 if len(fields) == 6 else 1] == "*"


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; raises ``ValidationFailedError`` for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValidationFailedError(
            "timezone", f"{name!r} is not an IANA time zone (e.g. UTC, Europe/Paris)"
        ) from e


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


def _utc_next(expr: str, after_ms: int) -> int:
    start = datetime.fromtimestamp(after_ms / 1000, tz=UTC)
    iterator = croniter(expr, start, second_at_beginning=_is_seconds_first(expr))
    return round(iterator.get_next(float) * 1000)


def _instants(wall: datetime, tz: ZoneInfo, every_hour: bool) -> list[int]:
    """The instants (epoch ms) at which a wall-clock time happens in ``tz``."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    exists = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
    if not exists:
        return [] if every_hour else [_ms(first)]
    if first.utcoffset() != second.utcoffset() and every_hour:
        return [_ms(first), _ms(second)]
    return [_ms(first)]


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def next_trigger_ms(expr: str, after_ms: int, timezone: str = "UTC") -> int:
    """The first time the expression fires strictly after ``after_ms``, in ``timezone``."""
    if timezone == "UTC":
        return _utc_next(expr, after_ms)
    tz = zone(timezone)
    every_hour = _fires_every_hour(expr)
    local = datetime.fromtimestamp(after_ms / 1000, tz=UTC).astimezone(tz).replace(tzinfo=None)
    # Start an hour back in wall time: after a fall-back, wall times already passed once
    # come again, and the earliest instant after ``after_ms`` may lie among them.
    iterator = croniter(
        expr, local - timedelta(hours=1), second_at_beginning=_is_seconds_first(expr)
    )
    best: int | None = None
    for _ in range(_SEARCH_LIMIT):
        wall = iterator.get_next(datetime)
        found = [t for t in _instants(wall, tz, every_hour) if t > after_ms]
        if found:
            best = min([*found, best] if best is not None else found)
        if best is not None and wall > local + timedelta(hours=2):
            return best
    if best is None:
        raise ValueError(f"{expr!r} does not fire within {_SEARCH_LIMIT} steps")
    return best


def preview(expr: str, after_ms: int, count: int, timezone: str = "UTC") -> list[int]:
    """The next ``count`` trigger times after ``after_ms``."""
    times: list[int] = []
    cursor = after_ms
    for _ in range(count):
        cursor = next_trigger_ms(expr, cursor, timezone)
        times.append(cursor)
    return times
