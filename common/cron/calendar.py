"""The next wall-clock time a cron's fields match, computed over the fields, not by steps.

Wall times are whole seconds counted from 1970-01-01T00:00 as a clock on the wall reads
them, with no zone: ``common.cron.zone`` turns them into instants. The search jumps from
matching day to matching day (months outside the month field are skipped whole) and
picks the time of day with a binary search in each field, so its work does not grow
with how often the expression fires. Dates stop at 9999-12-31.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from dataclasses import dataclass
from datetime import date
from types import MappingProxyType

from common.cron.fields import CronFields, DayRule

DAY_S = 86_400
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_LAST_YEAR = 9999
_LONGEST_MONTH = MappingProxyType({2: 29, 4: 30, 6: 30, 9: 30, 11: 30})


@dataclass
class CronWork:
    """What one next-time computation did, counted; tests bound it by these counts.

    ``months``: months looked at for a matching day; ``probes``: zone offsets looked
    up; ``rounds``: stretches of constant offset walked (``common.cron.zone``).
    """

    months: int = 0
    probes: int = 0
    rounds: int = 0


def never_fires_reason(fields: CronFields) -> str | None:
    """Why no date ever matches (day 30 in February only), or None when some does."""
    rule = fields.day_rule
    if rule.any_day or not rule.any_weekday or rule.last:
        return None
    first_day = (rule.days & -rule.days).bit_length() - 1
    if any(first_day <= _LONGEST_MONTH.get(month, 31) for month in fields.months):
        return None
    names = ", ".join(calendar.month_abbr[m] for m in fields.months)
    return f"no month in it ({names}) has day {first_day}"


def next_wall(fields: CronFields, wall: int, work: CronWork) -> int | None:
    """The first matching wall time at or after ``wall``; None past 9999-12-31."""
    day, second = divmod(wall, DAY_S)
    if _day_matches(fields, day):
        later = _time_of_day(fields, second)
        if later is not None:
            return day * DAY_S + later
    upcoming = _next_day(fields, day + 1, work)
    if upcoming is None:
        return None
    return upcoming * DAY_S + _first_time(fields)


def _first_time(fields: CronFields) -> int:
    return fields.hours[0] * 3600 + fields.minutes[0] * 60 + fields.seconds[0]


def _time_of_day(fields: CronFields, second: int) -> int | None:
    """The first matching second of the day at or after ``second``."""
    hour, rest = divmod(second, 3600)
    minute, sec = divmod(rest, 60)
    first_hour = bisect_left(fields.hours, hour)
    for h in fields.hours[first_hour : first_hour + 2]:
        if h > hour:
            return h * 3600 + fields.minutes[0] * 60 + fields.seconds[0]
        first_minute = bisect_left(fields.minutes, minute)
        for m in fields.minutes[first_minute : first_minute + 2]:
            if m > minute:
                return h * 3600 + m * 60 + fields.seconds[0]
            index = bisect_left(fields.seconds, sec)
            if index < len(fields.seconds):
                return h * 3600 + m * 60 + fields.seconds[index]
    return None


def _day_matches(fields: CronFields, day: int) -> bool:
    when = date.fromordinal(day + _EPOCH_ORDINAL)
    if when.month not in fields.months:
        return False
    return bool(_month_mask(fields.day_rule, when.year, when.month) >> when.day & 1)


def _month_mask(rule: DayRule, year: int, month: int) -> int:
    first_weekday, length = calendar.monthrange(year, month)
    return rule.month_mask((first_weekday + 1) % 7, length)


def _next_day(fields: CronFields, day: int, work: CronWork) -> int | None:
    """The first matching day (days since 1970-01-01) at or after ``day``."""
    when = date.fromordinal(day + _EPOCH_ORDINAL)
    year, month, first = when.year, when.month, when.day
    months = fields.months
    while year <= _LAST_YEAR:
        index = bisect_left(months, month)
        if index == len(months):
            year, month, first = year + 1, months[0], 1
            continue
        if months[index] != month:
            month, first = months[index], 1
        work.months += 1
        matching = _month_mask(fields.day_rule, year, month) >> first
        if matching:
            found = first + (matching & -matching).bit_length() - 1
            return date(year, month, found).toordinal() - _EPOCH_ORDINAL
        month, first = month + 1, 1
    return None
