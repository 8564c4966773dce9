"""A slow, obviously right cron for the property tests: random expressions with their
meaning, and the fires that README's rules give, found by walking wall times one by one.

It shares no code with ``common.cron``: a generated expression carries the sets of
values it was written from, and the fires come from ``zoneinfo`` (PEP 495: ``fold=0``
of a skipped wall time uses the offset before the change, which is the shift by the
gap).
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import strategies as st

MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


@dataclass(frozen=True)
class Cron:
    """An expression's text and what it means, as the generator wrote it."""

    text: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int] | None  # None: the field is *
    last: bool
    months: frozenset[int]
    weekdays: frozenset[int] | None  # None: the field is *
    nth: frozenset[tuple[int, int]]

    @property
    def every_hour(self) -> bool:
        """The hour field covers all 24 hours."""
        return len(self.hours) == 24

    def day_matches(self, day: date) -> bool:
        """The two day fields together, as README says."""
        if day.month not in self.months:
            return False
        length = calendar.monthrange(day.year, day.month)[1]
        by_day = (self.days is not None and day.day in self.days) or (
            self.last and day.day == length
        )
        weekday = (day.weekday() + 1) % 7
        by_weekday = (self.weekdays is not None and weekday in self.weekdays) or (
            (weekday, (day.day - 1) // 7 + 1) in self.nth
        )
        if self.days is None and not self.last:
            return (self.weekdays is None and not self.nth) or by_weekday
        if self.weekdays is None and not self.nth:
            return by_day
        return by_day or by_weekday

    def matches(self, wall: datetime) -> bool:
        """Whether a wall time is one of the expression's."""
        return (
            self.day_matches(wall.date())
            and wall.hour in self.hours
            and wall.minute in self.minutes
            and wall.second in self.seconds
        )


@dataclass(frozen=True)
class Field:
    """One field written out: its text and values (None when written ``*``)."""

    text: str
    values: frozenset[int] | None


def _name(value: int, names: tuple[str, ...], base: int, use: bool) -> str:
    index = value - base
    return names[index] if use and 0 <= index < len(names) else str(value)


@st.composite
def field(
    draw: st.DrawFn,
    low: int,
    high: int,
    names: tuple[str, ...] = (),
    base: int = 0,
    step_end: int | None = None,
) -> Field:
    """A field in any accepted form: *, value, range, steps, or a list of them."""
    end = high if step_end is None else step_end
    kind = draw(st.sampled_from(["*", "item", "list"]))
    if kind == "*":
        return Field("*", None)
    count = 1 if kind == "item" else draw(st.integers(2, 3))
    texts, values = [], set()
    for _ in range(count):
        text, found = draw(_item(low, high, end, names, base))
        texts.append(text)
        values |= found
    return Field(",".join(texts), frozenset(values))


@st.composite
def _item(
    draw: st.DrawFn, low: int, high: int, end: int, names: tuple[str, ...], base: int
) -> tuple[str, set[int]]:
    use_names = bool(names) and draw(st.booleans())
    form = draw(st.sampled_from(["value", "range", "every", "range-step", "from-step"]))
    step = draw(st.integers(1, max(1, (end - low) // 2 + 1)))
    if form == "every":
        return f"*/{step}", set(range(low, end + 1, step))
    first = draw(st.integers(low, high if form in ("value", "range") else end))
    if form == "value":
        return _name(first, names, base, use_names), {first}
    if form == "from-step":
        return f"{_name(first, names, base, use_names)}/{step}", set(range(first, end + 1, step))
    last = draw(st.integers(first, high))
    text = f"{_name(first, names, base, use_names)}-{_name(last, names, base, use_names)}"
    if form == "range":
        return text, set(range(first, last + 1))
    return f"{text}/{step}", set(range(first, last + 1, step))


@st.composite
def crons(draw: st.DrawFn) -> Cron:
    """A random accepted expression, 5 or 6 fields, and its meaning."""
    seconds = draw(field(0, 59)) if draw(st.booleans()) else Field("0", frozenset({0}))
    minutes, hours = draw(field(0, 59)), draw(field(0, 23))
    months = draw(field(1, 12, MONTH_NAMES, 1))
    day, last = draw(_day_of_month())
    weekday, nth = draw(_day_of_week())
    if day.values is not None and weekday.values is None and not nth and not last:
        # A day that no chosen month has would be refused: keep the generated ones valid.
        longest = max(calendar.monthrange(2028, m)[1] for m in months.values or range(1, 13))
        if min(day.values) > longest:
            day = Field("1", frozenset({1}))
    texts = [minutes.text, hours.text, day.text, months.text, weekday.text]
    if seconds.text != "0" or draw(st.booleans()):
        texts.insert(0, seconds.text)
    return Cron(
        text=" ".join(texts),
        seconds=_all(seconds, 0, 59),
        minutes=_all(minutes, 0, 59),
        hours=_all(hours, 0, 23),
        days=day.values,
        last=last,
        months=frozenset(_all(months, 1, 12)),
        weekdays=None if weekday.text == "*" else weekday.values or frozenset(),
        nth=frozenset(nth),
    )


def _all(written: Field, low: int, high: int) -> tuple[int, ...]:
    return tuple(sorted(written.values if written.values is not None else range(low, high + 1)))


@st.composite
def _day_of_month(draw: st.DrawFn) -> tuple[Field, bool]:
    written = draw(field(1, 31))
    if written.text != "*" and draw(st.integers(0, 4)) == 0:
        return Field(f"{written.text},L", written.values), True
    if draw(st.integers(0, 6)) == 0:
        return Field("L", None), True
    return written, False


@st.composite
def _day_of_week(draw: st.DrawFn) -> tuple[Field, list[tuple[int, int]]]:
    if draw(st.integers(0, 5)) == 0:
        weekday, n = draw(st.integers(0, 7)), draw(st.integers(1, 5))
        text = _name(weekday, DAY_NAMES, 0, draw(st.booleans()))
        return Field(f"{text}#{n}", frozenset()), [(weekday % 7, n)]
    written = draw(field(0, 7, DAY_NAMES, 0, step_end=6))
    if written.values is None:
        return written, []
    return Field(written.text, frozenset(v % 7 for v in written.values)), []


def walls(cron: Cron, start: datetime) -> Iterator[datetime]:
    """The expression's wall times from ``start`` on, in order, one by one."""
    day = start.date()
    while day.year < 9999:
        if cron.day_matches(day):
            yield from _walls_of_day(cron, day, start)
        day += timedelta(days=1)


def _walls_of_day(cron: Cron, day: date, start: datetime) -> Iterator[datetime]:
    for h in cron.hours:
        if datetime(day.year, day.month, day.day, h, 59, 59) < start:
            continue
        for m in cron.minutes:
            if datetime(day.year, day.month, day.day, h, m, 59) < start:
                continue
            for s in cron.seconds:
                wall = datetime(day.year, day.month, day.day, h, m, s)
                if wall >= start:
                    yield wall


def instants(cron: Cron, wall: datetime, tz: ZoneInfo) -> list[int]:
    """Where README's rules put a wall time (epoch ms): once, twice or not at all."""
    first = _ms(wall.replace(tzinfo=tz, fold=0))
    second = _ms(wall.replace(tzinfo=tz, fold=1))
    if first == second:
        return [first]
    if first < second:  # happens twice
        return [first, second] if cron.every_hour else [first]
    return [] if cron.every_hour else [first]  # skipped: fold=0 is the shifted time


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def fires(cron: Cron, tz: ZoneInfo, after_ms: int, count: int, spread: timedelta) -> list[int]:
    """The first ``count`` fires strictly after ``after_ms`` (fewer near year 9999).

    ``spread``: the most the zone's offset changes by (0 for a fixed offset); wall times
    that far before ``after_ms`` may still fire after it, and the walk ends that far
    past the ``count``-th fire.
    """
    local = datetime.fromtimestamp(after_ms // 1000, UTC).astimezone(tz).replace(tzinfo=None)
    found: list[int] = []
    for wall in walls(cron, local - spread):
        found = sorted({*found, *(t for t in instants(cron, wall, tz) if t > after_ms)})[:count]
        earliest_next = _ms(wall.replace(tzinfo=tz, fold=0)) - spread // timedelta(milliseconds=1)
        if len(found) == count and earliest_next > found[-1]:
            break
    return found
