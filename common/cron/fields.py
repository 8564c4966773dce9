"""The cron grammar Kairos accepts, parsed into the sets of values each field allows.

Five fields (minute hour day-of-month month day-of-week) or six with seconds first. A
field is a comma-separated list of items: ``*``, a value, a range ``A-B`` (A <= B), a
step ``*/S``, ``A-B/S`` or ``A/S`` (from A to the field's last value). Months and
weekdays may be named (``JAN``, ``MON``; any case); weekday 7 is Sunday, like 0. Day of
month also takes ``L`` (the last day of the month), day of week ``D#N`` (the N-th
weekday D of the month). Nothing else: other dialects' extensions (``?``, ``H``, ``R``,
``W``, ``L`` elsewhere, a year field) are refused with a ``CronSyntaxError`` saying so.

When both day fields are other than ``*``, a day matches if either matches (as cron
has always done); when one is ``*``, only the other one counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NUMBER = re.compile(r"[0-9]+")


class CronSyntaxError(ValueError):
    """A cron expression outside the accepted grammar; the message says what to write."""


@dataclass(frozen=True)
class _Field:
    """How one field is read: its name, its values, the names it takes."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0
    step_end: int | None = None  # where ``*`` and ``A/S`` end, when not at ``high``


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DAY = _Field("day of month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTHS, 1)
_WEEKDAY = _Field("day of week", 0, 7, _WEEKDAYS, 0, step_end=6)


@dataclass(frozen=True)
class DayRule:
    """Which days of a month match: the day-of-month and day-of-week fields together.

    ``days`` and ``weekdays`` are bit masks (bit d: day d of the month; bit w: weekday
    w, Sunday 0); ``last`` is ``L``; ``nth`` holds the ``D#N`` pairs. A field written
    ``*`` is unrestricted (``any_day``, ``any_weekday``).
    """

    days: int
    last: bool
    weekdays: int
    nth: tuple[tuple[int, int], ...]
    any_day: bool
    any_weekday: bool

    @cached_property
    def weekday_masks(self) -> tuple[int, ...]:
        """For each weekday of the 1st (Sunday 0), the days 1-31 whose weekday matches."""
        masks = []
        for first in range(7):
            mask = 0
            for day in range(1, 32):
                if self.weekdays >> ((first + day - 1) % 7) & 1:
                    mask |= 1 << day
            masks.append(mask)
        return tuple(masks)

    def month_mask(self, first_weekday: int, length: int) -> int:
        """The matching days (bit d: day d) of a month of ``length`` days."""
        valid = (1 << (length + 1)) - 2
        by_day = valid if self.any_day else self.days | (1 << length if self.last else 0)
        by_weekday = valid if self.any_weekday else self.weekday_masks[first_weekday]
        for weekday, n in self.nth:
            day = 1 + (weekday - first_weekday) % 7 + 7 * (n - 1)
            by_weekday |= 1 << day if day <= length else 0
        if self.any_day or self.any_weekday:
            return by_day & by_weekday & valid
        return (by_day | by_weekday) & valid


@dataclass(frozen=True)
class CronFields:
    """A parsed expression: sorted values per time field, the months, the day rule."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    day_rule: DayRule

    @property
    def every_hour(self) -> bool:
        """True when the hour field covers all 24 hours (``*``, ``*/1``, ``0-23``).

        Such an expression fires in every hour of the days it fires on, so across a
        daylight-saving change it runs in both passes of a repeated hour and skips the
        wall times that do not exist; any other expression shifts and dedupes them.
        """
        return len(self.hours) == 24


def parse_fields(expr: str) -> CronFields:
    """Parse a 5- or 6-field expression; raise ``CronSyntaxError`` saying what is wrong."""
    parts = expr.split()
    if len(parts) not in (5, 6):
        raise CronSyntaxError(
            f"it has {len(parts)} fields; use 5 (minute hour day-of-month month "
            "day-of-week) or 6 (second minute hour day-of-month month day-of-week)"
        )
    if len(parts) == 5:
        parts = ["0", *parts]
    second, minute, hour, day, month, weekday = parts
    return CronFields(
        seconds=_sorted(_values(second, _SECOND)),
        minutes=_sorted(_values(minute, _MINUTE)),
        hours=_sorted(_values(hour, _HOUR)),
        months=_sorted(_values(month, _MONTH)),
        day_rule=_day_rule(day, weekday),
    )


def _sorted(values: set[int]) -> tuple[int, ...]:
    return tuple(sorted(values))


def _day_rule(day: str, weekday: str) -> DayRule:
    days, last = 0, False
    for item in _items(day, _DAY):
        if item.upper() == "L":
            last = True
        else:
            days |= _mask(_item_values(item, _DAY))
    weekdays, nth = 0, []
    for item in _items(weekday, _WEEKDAY):
        if "#" in item:
            nth.append(_nth(item))
        else:
            weekdays |= _mask({v % 7 for v in _item_values(item, _WEEKDAY)})
    return DayRule(days, last, weekdays, tuple(sorted(set(nth))), day == "*", weekday == "*")


def _mask(values: set[int]) -> int:
    mask = 0
    for value in values:
        mask |= 1 << value
    return mask


def _values(text: str, field: _Field) -> set[int]:
    values: set[int] = set()
    for item in _items(text, field):
        values |= _item_values(item, field)
    return values


def _items(text: str, field: _Field) -> list[str]:
    items = text.split(",")
    if any(not item for item in items):
        raise CronSyntaxError(f"{field.name} {text!r} has an empty list item")
    return items


def _item_values(item: str, field: _Field) -> set[int]:
    base, slash, step_text = item.partition("/")
    step = _step(step_text, item, field) if slash else 1
    end = field.high if field.step_end is None else field.step_end
    if base == "*":
        start = field.low
    elif "-" in base:
        start, end = _range(base, field)
    else:
        start = _value(base, field)
        if not slash:
            return {start}
        if start > end:
            raise CronSyntaxError(f"{field.name} {item!r}: {start}/S starts past {end}")
    return set(range(start, end + 1, step))


def _step(text: str, item: str, field: _Field) -> int:
    step = _number(text)
    if step is None or step == 0:
        raise CronSyntaxError(f"{field.name} {item!r}: the step must be a whole number from 1")
    return step


def _number(text: str) -> int | None:
    """A plain decimal number (any longer than 6 digits counts as 999999), else None."""
    if not _NUMBER.fullmatch(text):
        return None
    return int(text) if len(text) <= 6 else 999_999


def _range(text: str, field: _Field) -> tuple[int, int]:
    first, _, last = text.partition("-")
    start, end = _value(first, field), _value(last, field)
    if start > end:
        raise CronSyntaxError(
            f"{field.name} {text!r}: a range must go upward; list the values or write two ranges"
        )
    return start, end


def _value(text: str, field: _Field) -> int:
    upper = text.upper()
    if upper in field.names:
        return field.names.index(upper) + field.name_base
    value = _number(text)
    if value is None:
        raise CronSyntaxError(f"{field.name} {text!r}: {_why_not_a_value(upper, field)}")
    if not field.low <= value <= field.high:
        raise CronSyntaxError(f"{field.name} {text} is out of range {field.low}-{field.high}")
    return value


# Other dialects' extensions, refused by name so that the message says why.
_EXTENSIONS = (
    (re.compile(r".*\?.*"), "'?' (no specific value) is not supported: write * in that day field"),
    (re.compile(r"H(\(.*)?"), "H (a hashed value) is not supported: write the value"),
    (
        re.compile(r"R(\(.*)?"),
        "R (a random value) is not supported: the time would change on every "
        "computation; write the value",
    ),
    (re.compile(r"[0-9]*L?W"), "W (nearest weekday) is not supported"),
    (re.compile(r"[0-9]*L"), "L is accepted only alone in day of month (the last day)"),
    (re.compile(r".*#.*"), "D#N is accepted only in day of week"),
)


def _why_not_a_value(upper: str, field: _Field) -> str:
    if upper in _MONTHS or upper in _WEEKDAYS:
        return "names are accepted only in month (JAN-DEC) and day of week (SUN-SAT)"
    for pattern, reason in _EXTENSIONS:
        if pattern.fullmatch(upper):
            return reason
    if field.names:
        return f"not a number or a name ({field.names[0]}-{field.names[-1]})"
    return "not a number"


def _nth(item: str) -> tuple[int, int]:
    weekday, _, count = item.partition("#")
    n = _number(count)
    if n is None or not 1 <= n <= 5:
        raise CronSyntaxError(f"day of week {item!r}: D#N needs N from 1 to 5")
    return _value(weekday, _WEEKDAY) % 7, n
