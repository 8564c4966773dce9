"""Backfill: the past trigger times of a recurring job within a range, computed with
the job's own schedule, and which of them are the backfill's to run.

The range is half-open: ``from`` is included, ``to`` is not, so consecutive ranges
(one day, then the next) never share a time. Times at or after the job's next trigger
time belong to its schedule (the claim runs them, under the misfire policy), so a
backfill leaves them alone; the range is cut at now for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.cron import next_trigger_ms
from common.errors import BackfillTooLargeError, ValidationFailedError
from common.schedule import Schedule


@dataclass(frozen=True)
class BackfillPlan:
    """The trigger times of a range: those a backfill runs (``times``, ascending), and
    how many it leaves to the schedule (at or after the job's next trigger time)."""

    times: list[int]
    left_to_schedule: int


def range_times(
    schedule: Schedule, series_ms: int | None, from_ms: int, to_ms: int, limit: int
) -> list[int]:
    """The trigger times ``t`` of ``schedule`` with ``from_ms <= t < to_ms``, ascending.

    A cron's times are read in its zone (daylight saving as the claim applies it); a
    fixed rate's series runs through ``series_ms`` (the job's next trigger time) both
    ways. Raises ``BackfillTooLargeError`` when there are more than ``limit``, having
    computed at most ``limit + 1`` of them.
    """
    if schedule.cron_expr is not None:
        return _cron_times(schedule, from_ms, to_ms, limit)
    if schedule.fixed_rate_seconds is not None and series_ms is not None:
        return _rate_times(schedule.fixed_rate_seconds * 1000, series_ms, from_ms, to_ms, limit)
    return []


def _cron_times(schedule: Schedule, from_ms: int, to_ms: int, limit: int) -> list[int]:
    assert schedule.cron_expr is not None
    times: list[int] = []
    upcoming = next_trigger_ms(schedule.cron_expr, from_ms - 1, schedule.timezone)
    while upcoming is not None and upcoming < to_ms:
        if len(times) == limit:
            raise BackfillTooLargeError(limit)
        times.append(upcoming)
        upcoming = next_trigger_ms(schedule.cron_expr, upcoming, schedule.timezone)
    return times


def _rate_times(rate_ms: int, series_ms: int, from_ms: int, to_ms: int, limit: int) -> list[int]:
    # The series' first time at or after from_ms (floor division rounds toward it).
    first = series_ms - ((series_ms - from_ms) // rate_ms) * rate_ms
    count = 0 if first >= to_ms else (to_ms - 1 - first) // rate_ms + 1
    if count > limit:
        raise BackfillTooLargeError(limit)
    return [first + k * rate_ms for k in range(count)]


def plan_backfill(
    schedule: Schedule,
    next_trigger_ms: int | None,
    from_ms: int,
    to_ms: int,
    now_ms: int,
    limit: int,
) -> BackfillPlan:
    """The backfill of ``[from_ms, min(to_ms, now_ms))`` for a job whose next trigger
    is ``next_trigger_ms`` (None: its schedule has no time left).

    Raises ``ValidationFailedError`` for a one-shot schedule or an empty range (``to``
    not after ``from``), and ``BackfillTooLargeError`` past ``limit`` times in range.
    """
    if not schedule.recurring:
        raise ValidationFailedError(
            "jobId",
            "a one-shot job has no series of trigger times to backfill; backfill runs the "
            "past times of cron and fixed-rate jobs (POST .../trigger runs any job now)",
        )
    if to_ms <= from_ms:
        raise ValidationFailedError("to", "must be later than `from` (`to` is not included)")
    if from_ms >= now_ms:
        raise ValidationFailedError(
            "from",
            "is not in the past; a backfill runs past trigger times (the schedule "
            "runs the times to come)",
        )
    times = range_times(schedule, next_trigger_ms, from_ms, min(to_ms, now_ms), limit)
    if next_trigger_ms is None:
        return BackfillPlan(times, 0)
    ours = [t for t in times if t < next_trigger_ms]
    return BackfillPlan(ours, len(times) - len(ours))
