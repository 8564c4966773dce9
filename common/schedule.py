"""Scheduling policy as pure logic: when a job fires next, what a due trigger becomes
(run, skipped), and how long a failed attempt waits before its retry.

The dispatcher applies ``plan_trigger`` when it claims a due trigger; the results
consumer applies ``retry_delay_ms`` when an attempt fails.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import StrEnum

from common.cron import LAST_MS, next_trigger_ms
from common.errors import KairosError
from common.timefmt import iso_ms


class MisfirePolicy(StrEnum):
    """What to do with a trigger found more than the misfire threshold late."""

    FIRE_ONCE = "FIRE_ONCE"
    SKIP = "SKIP"
    FIRE_ALL = "FIRE_ALL"


class OverlapPolicy(StrEnum):
    """What to do when a recurring job's trigger comes while its last run still goes."""

    ALLOW = "ALLOW"
    FORBID = "FORBID"
    QUEUE = "QUEUE"


@dataclass(frozen=True)
class Schedule:
    """How a job repeats: a cron expression in a time zone, a fixed rate, or not at all."""

    cron_expr: str | None = None
    timezone: str = "UTC"
    fixed_rate_seconds: int | None = None

    @property
    def recurring(self) -> bool:
        """True for cron and fixed-rate jobs."""
        return self.cron_expr is not None or self.fixed_rate_seconds is not None

    def first_after(self, base_ms: int, after_ms: int) -> int | None:
        """The first trigger strictly after ``after_ms``, for a series through ``base_ms``.

        None for a one-shot job, and for a cron with no time left (``end_reason`` says
        so). Never raises for a cron and zone Kairos accepts; a stored one it no longer
        accepts raises ``ValidationFailedError`` saying why (the claimer ends that job
        alone).
        """
        if self.cron_expr is not None:
            return next_trigger_ms(self.cron_expr, after_ms, self.timezone)
        if self.fixed_rate_seconds is not None:
            rate = self.fixed_rate_seconds * 1000
            steps = max(0, (after_ms - base_ms) // rate) + 1
            return base_ms + steps * rate
        return None

    def end_reason(self, after_ms: int) -> str | None:
        """Why a cron has no trigger after ``after_ms`` (no time left, or a stored cron or
        zone that is not accepted); None when it has one, and for other schedules."""
        if self.cron_expr is None:
            return None
        where = f"cron {self.cron_expr!r} in {self.timezone}"
        try:
            if next_trigger_ms(self.cron_expr, after_ms, self.timezone) is not None:
                return None
        except KairosError as e:
            return f"{where} cannot be computed: {e}"
        return (
            f"{where} has no trigger time after {_when(after_ms)} "
            f"(cron times end at {iso_ms(LAST_MS)})"
        )

    def preview(self, from_ms: int, count: int) -> list[int]:
        """The next ``count`` trigger times from ``from_ms`` (itself included if it is one);
        fewer when a cron ends or is no longer accepted."""
        if not self.recurring:
            return [from_ms]
        times = [from_ms]
        try:
            while len(times) < count:
                upcoming = self.first_after(from_ms, times[-1])
                if upcoming is None:
                    break
                times.append(upcoming)
        except KairosError:
            pass  # a stored cron no longer accepted: only its stored next trigger
        return times


def _when(epoch_ms: int) -> str:
    try:
        return str(iso_ms(epoch_ms))
    except (ValueError, OverflowError, OSError):
        return f"{epoch_ms} ms"


@dataclass(frozen=True)
class TriggerPolicy:
    """A job's policies, as the claim needs them."""

    schedule: Schedule
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    misfire_threshold_ms: int = 60_000
    catch_up_window_ms: int = 3_600_000
    overlap: OverlapPolicy = OverlapPolicy.FORBID
    # Each trigger fires up to this late, by ``common.jitter``'s offset (0: on time).
    jitter_seconds: int = 0


@dataclass(frozen=True)
class TriggerPlan:
    """What a claimed trigger becomes.

    ``run``: create an execution (fired at ``fire_at``); otherwise a SKIPPED row with
    ``reason``. ``next_trigger`` is the job's next trigger time (None: no more).
    ``hold``: the job stays unclaimable (RUNNING) until this run ends. ``end_reason``:
    why a cron job has no next trigger (its cron has no time left before 9999-12-01);
    the job should end with it once this trigger is settled.
    """

    run: bool
    fire_at: int
    next_trigger: int | None
    hold: bool
    reason: str | None = None
    end_reason: str | None = None


def plan_trigger(
    policy: TriggerPolicy, trigger_ms: int, now_ms: int, jitter_ms: int = 0
) -> TriggerPlan:
    """Apply the misfire policy to the trigger at ``trigger_ms``, due ``jitter_ms``
    after it (its jitter: ``common.jitter``).

    The run fires at the jittered time, and lateness counts from it; the next trigger
    follows the schedule's own times. Overlap is decided when the execution fires
    (``overlap_skip_reason``), since a trigger may be claimed a little ahead of its
    time. Never raises for a schedule Kairos accepts; a stored cron or zone it no longer
    accepts raises ``ValidationFailedError`` saying why, for the claimer to end that job
    alone.
    """
    due_ms = trigger_ms + jitter_ms
    fire_at = max(due_ms, now_ms)
    late_ms = now_ms - due_ms
    misfired = late_ms > policy.misfire_threshold_ms
    schedule = policy.schedule
    hold = policy.overlap is OverlapPolicy.QUEUE
    if not schedule.recurring:
        if misfired and policy.misfire is MisfirePolicy.SKIP:
            return TriggerPlan(False, fire_at, None, False, _late(late_ms, "SKIP"))
        return TriggerPlan(True, fire_at, None, True)
    if not misfired:
        return _then(schedule, trigger_ms, trigger_ms, TriggerPlan(True, fire_at, None, hold))
    if policy.misfire is MisfirePolicy.SKIP:
        skipped = TriggerPlan(False, now_ms, None, False, _late(late_ms, "SKIP"))
        return _then(schedule, trigger_ms, now_ms, skipped)
    if policy.misfire is MisfirePolicy.FIRE_ONCE:
        return _then(schedule, trigger_ms, now_ms, TriggerPlan(True, now_ms, None, hold))
    window_start = now_ms - policy.catch_up_window_ms
    if trigger_ms < window_start:
        reason = _late(late_ms, "FIRE_ALL") + "; older than the catch-up window"
        skipped = TriggerPlan(False, now_ms, None, False, reason)
        return _then(schedule, trigger_ms, window_start - 1, skipped)
    return _then(schedule, trigger_ms, trigger_ms, TriggerPlan(True, now_ms, None, hold))


def _then(schedule: Schedule, base_ms: int, after_ms: int, plan: TriggerPlan) -> TriggerPlan:
    """``plan`` with the job's first trigger after ``after_ms``, or why it has none."""
    upcoming = schedule.first_after(base_ms, after_ms)
    if upcoming is not None:
        return replace(plan, next_trigger=upcoming)
    return replace(plan, end_reason=schedule.end_reason(after_ms))


def overlap_skip_reason(overlap: OverlapPolicy, others_running: bool) -> str | None:
    """Why a scheduled run must be skipped at fire time, if it must."""
    if others_running and overlap is OverlapPolicy.FORBID:
        return "skipped: the previous run is still going (overlap policy FORBID)"
    return None


def late_fire_skip_reason(
    policy: MisfirePolicy, threshold_ms: int, late_ms: int, later_trigger_overdue: bool
) -> str | None:
    """Why a claimed trigger fired late (its dispatcher died first) must not run now.

    SKIP skips it. FIRE_ONCE skips it when the job's next trigger is overdue as well,
    since that one runs once for all the missed ones; FIRE_ALL runs it.
    """
    if late_ms <= threshold_ms:
        return None
    if policy is MisfirePolicy.SKIP:
        return _late(late_ms, "SKIP")
    if policy is MisfirePolicy.FIRE_ONCE and later_trigger_overdue:
        return _late(late_ms, "FIRE_ONCE") + "; the latest missed trigger runs instead"
    return None


def _late(late_ms: int, policy: str) -> str:
    return f"skipped: missed by {late_ms / 1000:.1f} s (misfire policy {policy})"


def retry_delay_ms(
    attempt: int, base_seconds: int, cap_seconds: int, rng: random.Random | None = None
) -> int:
    """Wait before retrying after failed ``attempt`` (1-based): exponential, capped, jittered.

    The delay is drawn between half and all of ``min(cap, base * 2**(attempt-1))``, so
    retries of many jobs that failed together spread out instead of stampeding.
    """
    ceiling = min(cap_seconds, base_seconds * 2 ** max(0, attempt - 1)) * 1000
    draw = (rng or random).random()
    return int(ceiling / 2 + draw * ceiling / 2)


PAUSED_SKIP = "skipped: the job was paused at its trigger time"
# Of the triggers a recurring job missed while paused, at most this many are recorded
# as SKIPPED executions (the first ones); the last says how far the gap went.
PAUSE_SKIP_ROWS = 100


@dataclass(frozen=True)
class PauseGap:
    """What a recurring job missed while it was paused, found when it is resumed:
    the first missed triggers (``PAUSE_SKIP_ROWS`` at most), whether it missed more,
    and its first trigger at or after the resume (None: its cron has no time left)."""

    skipped: list[int]
    more: bool
    next_trigger: int | None


def pause_gap(schedule: Schedule, next_trigger_ms: int, now_ms: int) -> PauseGap:
    """The triggers due before ``now_ms`` from ``next_trigger_ms`` on, and the first at
    or after ``now_ms``: a pause skips what falls inside it."""
    skipped: list[int] = []
    upcoming: int | None = next_trigger_ms
    while upcoming is not None and upcoming < now_ms and len(skipped) < PAUSE_SKIP_ROWS:
        skipped.append(upcoming)
        upcoming = schedule.first_after(next_trigger_ms, upcoming)
    if upcoming is None or upcoming >= now_ms:
        return PauseGap(skipped, False, upcoming)
    return PauseGap(skipped, True, schedule.first_after(next_trigger_ms, now_ms - 1))
