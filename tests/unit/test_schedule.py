"""Misfire and overlap policies, fixed rates and retry backoff as pure logic."""

from __future__ import annotations

import random
import re

import pytest

from common.errors import ValidationFailedError
from common.schedule import (
    PAUSE_SKIP_ROWS,
    MisfirePolicy,
    OverlapPolicy,
    PauseGap,
    Schedule,
    TriggerPolicy,
    overlap_skip_reason,
    pause_gap,
    plan_trigger,
    retry_delay_ms,
)
from common.timefmt import parse_instant

MINUTE = 60_000
EVERY_MINUTE = Schedule("* * * * *")


def policy(
    schedule: Schedule = EVERY_MINUTE,
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE,
    overlap: OverlapPolicy = OverlapPolicy.FORBID,
) -> TriggerPolicy:
    return TriggerPolicy(schedule, misfire, 5_000, 10 * MINUTE, overlap)


def test_on_time_trigger_runs_at_its_time_and_moves_to_the_next() -> None:
    plan = plan_trigger(policy(), 10 * MINUTE, 10 * MINUTE - 300)
    assert (plan.run, plan.fire_at, plan.next_trigger, plan.hold) == (
        True,
        10 * MINUTE,
        11 * MINUTE,
        False,
    )


def test_slightly_late_trigger_is_not_a_misfire() -> None:
    plan = plan_trigger(policy(misfire=MisfirePolicy.SKIP), 10 * MINUTE, 10 * MINUTE + 4_000)
    assert plan.run
    assert plan.fire_at == 10 * MINUTE + 4_000


def test_fire_once_runs_the_missed_trigger_once_then_continues_from_now() -> None:
    now = 30 * MINUTE + 10_000
    plan = plan_trigger(policy(), 10 * MINUTE, now)
    assert plan.run
    assert plan.fire_at == now
    assert plan.next_trigger == 31 * MINUTE


def test_skip_records_the_miss_and_jumps_to_the_next_future_time() -> None:
    plan = plan_trigger(policy(misfire=MisfirePolicy.SKIP), 10 * MINUTE, 30 * MINUTE + 1)
    assert not plan.run
    assert plan.next_trigger == 31 * MINUTE
    assert plan.reason is not None and "SKIP" in plan.reason


def test_fire_all_runs_missed_triggers_one_by_one() -> None:
    plan = plan_trigger(policy(misfire=MisfirePolicy.FIRE_ALL), 25 * MINUTE, 30 * MINUTE)
    assert plan.run
    assert plan.next_trigger == 26 * MINUTE


def test_fire_all_skips_what_is_older_than_the_catch_up_window() -> None:
    plan = plan_trigger(policy(misfire=MisfirePolicy.FIRE_ALL), 5 * MINUTE, 30 * MINUTE)
    assert not plan.run
    assert plan.next_trigger == 20 * MINUTE
    assert plan.reason is not None and "catch-up window" in plan.reason


def test_queue_overlap_holds_the_job() -> None:
    plan = plan_trigger(policy(overlap=OverlapPolicy.QUEUE), 10 * MINUTE, 10 * MINUTE)
    assert plan.hold


def test_one_shot_runs_and_holds_with_no_next_trigger() -> None:
    plan = plan_trigger(policy(schedule=Schedule()), 1_000, 1_000)
    assert (plan.run, plan.next_trigger, plan.hold) == (True, None, True)


def test_one_shot_misfire_skip_ends_without_running() -> None:
    plan = plan_trigger(policy(Schedule(), MisfirePolicy.SKIP), 1_000, 1_000 + MINUTE)
    assert not plan.run
    assert plan.next_trigger is None


@pytest.mark.parametrize(
    ("overlap", "busy", "skipped"),
    [
        (OverlapPolicy.FORBID, True, True),
        (OverlapPolicy.FORBID, False, False),
        (OverlapPolicy.ALLOW, True, False),
        (OverlapPolicy.QUEUE, True, False),
    ],
)
def test_overlap_skip_only_for_forbid_while_busy(
    overlap: OverlapPolicy, busy: bool, skipped: bool
) -> None:
    assert (overlap_skip_reason(overlap, busy) is not None) is skipped


def test_fixed_rate_steps_from_its_base() -> None:
    every_ten = Schedule(fixed_rate_seconds=10)
    assert every_ten.first_after(1_000, 1_000) == 11_000
    assert every_ten.first_after(1_000, 35_500) == 41_000
    assert every_ten.preview(1_000, 3) == [1_000, 11_000, 21_000]


def test_fixed_rate_misfire_fire_once_continues_on_the_grid() -> None:
    plan = plan_trigger(policy(schedule=Schedule(fixed_rate_seconds=10)), 0, 65_000)
    assert plan.run
    assert plan.next_trigger == 70_000


def test_preview_lists_the_next_cron_times() -> None:
    assert EVERY_MINUTE.preview(MINUTE, 3) == [MINUTE, 2 * MINUTE, 3 * MINUTE]


LEAP_9996 = parse_instant("9996-02-29T00:00:00Z")


def test_preview_stops_where_the_cron_ends() -> None:
    assert Schedule("0 0 29 2 *").preview(LEAP_9996, 5) == [LEAP_9996]


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        ("R * * * *", "R (a random value) is not supported"),
        ("0 0 30 2 *", "never fires"),
        ("not a cron", "is not a valid cron"),
    ],
)
def test_a_stored_cron_no_longer_accepted_is_an_error_that_says_why(stored: str, why: str) -> None:
    """An expression stored before it was refused: a ValidationFailedError naming it,
    which the claimer turns into that one job's end; a preview shows what is stored."""
    schedule = Schedule(stored, "Europe/Paris")
    with pytest.raises(ValidationFailedError, match=re.escape(why)) as caught:
        schedule.first_after(0, 10 * MINUTE)
    assert caught.value.field == "cronExpr"
    assert why in str(schedule.end_reason(10 * MINUTE))
    assert schedule.preview(10 * MINUTE, 5) == [10 * MINUTE]


def test_a_stored_zone_that_no_longer_exists_is_an_error_that_says_why() -> None:
    schedule = Schedule("* * * * *", "Mars/Olympus_Mons")
    with pytest.raises(ValidationFailedError) as caught:
        schedule.first_after(0, 0)
    assert caught.value.field == "timezone"
    assert "is not an IANA time zone" in str(schedule.end_reason(0))


def test_a_cron_with_no_time_left_plans_its_last_run_and_says_why_it_ends() -> None:
    plan = plan_trigger(policy(Schedule("0 0 29 2 *")), LEAP_9996, LEAP_9996)
    assert (plan.run, plan.next_trigger) == (True, None)
    assert plan.end_reason == (
        "cron '0 0 29 2 *' in UTC has no trigger time after 9996-02-29T00:00:00.000Z "
        "(cron times end at 9999-12-01T00:00:00.000Z)"
    )


@pytest.mark.parametrize("misfire", list(MisfirePolicy))
def test_an_unreadable_cron_is_a_validation_error_whatever_the_policy(
    misfire: MisfirePolicy,
) -> None:
    with pytest.raises(ValidationFailedError, match="R \\(a random value\\)"):
        plan_trigger(policy(Schedule("R * * * *"), misfire), 10 * MINUTE, 30 * MINUTE)


@pytest.mark.parametrize("misfire", list(MisfirePolicy))
def test_a_cron_with_no_time_left_never_raises_whatever_the_policy(
    misfire: MisfirePolicy,
) -> None:
    late = LEAP_9996 + 30 * MINUTE
    plan = plan_trigger(policy(Schedule("0 0 29 2 *"), misfire), LEAP_9996, late)
    assert plan.next_trigger is None
    assert "has no trigger time after" in str(plan.end_reason)


def test_a_cron_with_a_next_time_has_no_end_reason() -> None:
    assert plan_trigger(policy(), 10 * MINUTE, 10 * MINUTE).end_reason is None
    assert EVERY_MINUTE.end_reason(0) is None
    assert Schedule().end_reason(0) is None


@pytest.mark.parametrize(("attempt", "ceiling_s"), [(1, 10), (2, 20), (3, 40), (8, 300)])
def test_retry_backoff_is_exponential_capped_and_jittered(attempt: int, ceiling_s: int) -> None:
    rng = random.Random(7)
    delays = [retry_delay_ms(attempt, 10, 300, rng) for _ in range(200)]
    assert min(delays) >= ceiling_s * 500
    assert max(delays) <= ceiling_s * 1000
    assert len(set(delays)) > 100, "jitter spreads retries out"


def test_a_pause_skips_the_triggers_inside_it_and_resumes_at_the_next_one() -> None:
    every_minute = Schedule("* * * * *")
    gap = pause_gap(every_minute, 60_000, 200_000)
    assert gap == PauseGap([60_000, 120_000, 180_000], False, 240_000)


def test_a_long_pause_records_the_first_missed_triggers_and_says_there_were_more() -> None:
    every_second = Schedule(fixed_rate_seconds=1)
    gap = pause_gap(every_second, 1_000, 1_000_000)
    assert len(gap.skipped) == PAUSE_SKIP_ROWS
    assert gap.skipped[:2] == [1_000, 2_000]
    assert gap.more
    assert gap.next_trigger == 1_000_000


def test_a_pause_that_missed_nothing_keeps_the_next_trigger() -> None:
    assert pause_gap(Schedule("* * * * *"), 300_000, 200_000) == PauseGap([], False, 300_000)
