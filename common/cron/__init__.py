"""Cron expressions: 5 fields (minute first) or 6 fields (seconds first, as Quartz/Spring).

``*/2 * * * * *`` means every two seconds. Times are epoch milliseconds; expressions are
read in an IANA time zone (UTC by default). The grammar is in ``common.cron.fields``,
the calendar search in ``common.cron.calendar`` and the daylight-saving rules in
``common.cron.zone``. A next time costs a bounded amount of work whatever the
expression and zone (a few zone lookups and one calendar search), and is exact: the
rules, not a step limit, decide what fires.
"""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from common.cron.calendar import CronWork, never_fires_reason
from common.cron.fields import CronFields, CronSyntaxError, parse_fields
from common.cron.zone import LAST_S, next_trigger_s
from common.errors import ValidationFailedError

__all__ = [
    "LAST_MS",
    "CronWork",
    "next_trigger_ms",
    "parse_cron",
    "preview",
    "validate_cron",
    "zone",
]

LAST_MS = LAST_S * 1000  # cron times are computed up to 9999-12-01T00:00:00Z


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; raises ``ValidationFailedError`` for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValidationFailedError(
            "timezone", f"{name!r} is not an IANA time zone (e.g. UTC, Europe/Paris)"
        ) from e


@lru_cache(maxsize=4096)
def parse_cron(expr: str) -> CronFields:
    """The fields of an accepted expression; raises ``ValidationFailedError`` saying why
    an expression is not accepted (the grammar is in README, "Cron expressions")."""
    try:
        fields = parse_fields(expr)
    except CronSyntaxError as e:
        raise ValidationFailedError("cronExpr", f"{expr!r} is not a valid cron: {e}") from e
    never = never_fires_reason(fields)
    if never is not None:
        raise ValidationFailedError("cronExpr", f"{expr!r} never fires: {never}")
    return fields


def validate_cron(expr: str) -> str:
    """Return the expression normalised, or raise ``ValidationFailedError`` saying why."""
    normalised = " ".join(expr.split())
    parse_cron(normalised)
    return normalised


def next_trigger_ms(
    expr: str, after_ms: int, timezone: str = "UTC", work: CronWork | None = None
) -> int | None:
    """The first time the expression fires strictly after ``after_ms``, in ``timezone``.

    None when it never fires again before ``LAST_MS``. Raises ``ValidationFailedError``
    only for an expression or zone Kairos does not accept. ``work``, when given, counts
    what the computation did.
    """
    fields = parse_cron(" ".join(expr.split()))
    tz = zone(timezone)
    if after_ms >= LAST_MS:
        return None
    # Fires fall on whole seconds: the first candidate is the next whole second.
    found = next_trigger_s(fields, tz, int(after_ms) // 1000 + 1, work or CronWork())
    return None if found is None else found * 1000


def preview(expr: str, after_ms: int, count: int, timezone: str = "UTC") -> list[int]:
    """The next ``count`` trigger times after ``after_ms`` (fewer when the cron ends)."""
    times: list[int] = []
    while len(times) < count:
        upcoming = next_trigger_ms(expr, times[-1] if times else after_ms, timezone)
        if upcoming is None:
            break
        times.append(upcoming)
    return times
