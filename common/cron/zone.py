"""From matching wall times to instants in an IANA zone, across offset changes.

A zone's timeline is a run of stretches with a constant UTC offset. Within one, wall
time and instant move together, so the next trigger time is the next matching wall
time less the offset. At an offset change (daylight saving, or a zone changing its standard
time) Kairos applies these rules (README, "Daylight saving"):

- wall times the clock skips fire once, shifted by the gap (02:30 fires at 03:30),
  unless the expression fires every hour (``CronFields.every_hour``): then they are
  skipped, as the hour after them fires anyway;
- wall times that happen twice fire once, at their first occurrence, unless the
  expression fires every hour: then they fire in both passes.

The walk looks up the offset at a few instants and finds a change by bisection; it
relies on two facts of the tz database since 1970: a zone changes its offset at most
once in any ``WINDOW_S`` (the closest two changes of any zone are a week apart), and
offsets lie within -12 h and +14 h, so no change exceeds 26 hours. Its work is bounded
by a count: a few rounds, each a handful of lookups and one ``next_wall``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from common.cron.calendar import CronWork, next_wall
from common.cron.fields import CronFields

WINDOW_S = 27 * 3600
FIRST_S = 0  # 1970-01-01T00:00:00Z: nothing fires earlier
LAST_S = int(datetime(9999, 12, 1, tzinfo=UTC).timestamp())  # nor later
MAX_ROUNDS = 16  # a computation takes at most 6; more would be a defect

log = logging.getLogger(__name__)


class _Walk:
    """One computation: the fields, the zone, and the work counted so far."""

    def __init__(self, fields: CronFields, tz: ZoneInfo, work: CronWork) -> None:
        self.fields = fields
        self.tz = tz
        self.work = work

    def offset(self, instant: int) -> int:
        """The zone's UTC offset (seconds) at ``instant`` (epoch seconds)."""
        self.work.probes += 1
        clamped = min(max(instant, FIRST_S - 2 * WINDOW_S), LAST_S + 2 * WINDOW_S)
        delta = datetime.fromtimestamp(clamped, self.tz).utcoffset()
        return int(delta.total_seconds()) if delta is not None else 0

    def change_in(self, start: int, end: int, start_offset: int) -> int | None:
        """The instant in (start, end] where the offset stops being ``start_offset``.

        ``end - start`` is at most ``WINDOW_S``, so there is at most one change.
        """
        if end <= start or self.offset(end) == start_offset:
            return None
        low, high = start, end
        while high - low > 1:
            middle = (low + high) // 2
            if self.offset(middle) == start_offset:
                low = middle
            else:
                high = middle
        return high

    def wall(self, at_or_after: int) -> int | None:
        """The first matching wall time at or after ``at_or_after``."""
        return next_wall(self.fields, at_or_after, self.work)


def next_trigger_s(fields: CronFields, tz: ZoneInfo, first: int, work: CronWork) -> int | None:
    """The first instant (epoch seconds) at or after ``first`` at which the fields fire.

    None when there is none up to ``LAST_S``.
    """
    walk = _Walk(fields, tz, work)
    start = max(first, FIRST_S)
    for _ in range(MAX_ROUNDS):
        if start > LAST_S:
            return None
        work.rounds += 1
        found, start = _round(walk, start)
        if found is not None:
            return found if found <= LAST_S else None
    log.error("cron next time gave up after %d rounds from %d in %s", MAX_ROUNDS, first, tz)
    return None


def _round(walk: _Walk, start: int) -> tuple[int | None, int]:
    """Look for a trigger time in the stretch of constant offset that holds ``start``.

    Returns the trigger time, or None and where to look next: the next offset change, or (when
    the next matching wall time is far off) ``WINDOW_S`` before that time, as no
    instant in between can fire (every offset is within 26 hours of any other).
    """
    offset = walk.offset(start)
    last = None if walk.fields.every_hour else _last_change(walk, start, offset)
    skipped = _skipped_trigger(walk, start, offset, last)
    wall = walk.wall(_first_wall(start, offset, last))
    if wall is None:
        return skipped, LAST_S + 1
    real = wall - offset
    change = walk.change_in(start, min(real, start + WINDOW_S), offset)
    if change is None and real <= start + WINDOW_S:
        return real if skipped is None else min(skipped, real), real
    if skipped is not None and (change is None or skipped < change):
        return skipped, start
    return None, real - WINDOW_S if change is None else change


def _last_change(walk: _Walk, start: int, offset: int) -> tuple[int, int] | None:
    """The offset change at or before ``start`` within ``WINDOW_S``: (instant, offset
    before it), or None."""
    before = walk.offset(start - WINDOW_S)
    if before == offset:
        return None
    change = walk.change_in(start - WINDOW_S, start, before)
    return None if change is None else (change, before)


def _skipped_trigger(
    walk: _Walk, start: int, offset: int, last: tuple[int, int] | None
) -> int | None:
    """The first trigger time at or after ``start`` of a wall time the last change skipped.

    A gap skips the wall times [change + before, change + offset); each of them fires
    at its time less the old offset, so within [change, change + gap).
    """
    if last is None or last[1] >= offset:
        return None
    change, before = last
    wall = walk.wall(max(change, start) + before)
    if wall is None or wall >= change + offset:
        return None
    return wall - before


def _first_wall(start: int, offset: int, last: tuple[int, int] | None) -> int:
    """The first wall time the stretch holding ``start`` may fire at.

    After a fall-back from ``before`` down to ``offset``, the walls before ``change +
    before`` happen a second time; they had their turn in the first pass.
    """
    if last is None or last[1] <= offset:
        return start + offset
    change, before = last
    return max(start + offset, change + before)
