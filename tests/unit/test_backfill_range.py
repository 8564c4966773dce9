"""The trigger times a backfill covers: the job's own schedule, in its zone, half-open
ranges, the job's next trigger time and the bound."""

from __future__ import annotations

import pytest

from common.backfill import plan_backfill, range_times
from common.cron import next_trigger_ms
from common.errors import BackfillTooLargeError, ValidationFailedError
from common.schedule import Schedule
from common.timefmt import parse_instant

HOURLY_PARIS = Schedule(cron_expr="0 * * * *", timezone="Europe/Paris")
NOW = parse_instant("2027-01-01T00:00:00Z")


def ms(text: str) -> int:
    return parse_instant(text)


def test_from_is_included_and_to_is_not() -> None:
    daily = Schedule(cron_expr="0 3 * * *")
    times = range_times(daily, None, ms("2026-11-01T03:00:00Z"), ms("2026-11-04T03:00:00Z"), 100)
    assert times == [
        ms("2026-11-01T03:00:00Z"),
        ms("2026-11-02T03:00:00Z"),
        ms("2026-11-03T03:00:00Z"),
    ]


def test_consecutive_ranges_share_no_time() -> None:
    minutely = Schedule(cron_expr="* * * * *")
    first = range_times(minutely, None, ms("2026-11-01T00:00:00Z"), ms("2026-11-01T01:00:00Z"), 100)
    second = range_times(
        minutely, None, ms("2026-11-01T01:00:00Z"), ms("2026-11-01T02:00:00Z"), 100
    )
    assert len(first) == len(second) == 60
    assert not set(first) & set(second)


def test_a_spring_forward_day_has_23_hourly_times_in_its_zone() -> None:
    times = range_times(
        HOURLY_PARIS, None, ms("2026-03-28T23:00:00Z"), ms("2026-03-29T22:00:00Z"), 100
    )
    assert len(times) == 23  # 00:00 to 23:00 Paris time, 02:00 never happens


def test_cron_times_are_the_claims_own_chain_across_both_changes() -> None:
    start, end = ms("2026-03-27T00:00:00Z"), ms("2026-11-01T00:00:00Z")
    for expr in ("30 2 * * *", "0 */3 * * *", "15 1-3 * * 0"):
        schedule = Schedule(cron_expr=expr, timezone="Europe/Paris")
        chain: list[int] = []
        upcoming = next_trigger_ms(expr, start - 1, "Europe/Paris")
        while upcoming is not None and upcoming < end:
            chain.append(upcoming)
            upcoming = next_trigger_ms(expr, upcoming, "Europe/Paris")
        assert range_times(schedule, None, start, end, 10_000) == chain


def test_a_fixed_rate_series_runs_through_the_next_trigger_both_ways() -> None:
    every_10s = Schedule(fixed_rate_seconds=10)
    series = 1_000_005_000
    assert range_times(every_10s, series, 999_960_000, 999_995_001, 100) == [
        999_965_000,
        999_975_000,
        999_985_000,
        999_995_000,
    ]
    assert range_times(every_10s, series, series, series + 20_000, 100) == [
        series,
        series + 10_000,
    ]
    assert range_times(every_10s, series, series + 1, series + 10_000, 100) == []


def test_past_the_bound_is_refused_naming_the_setting() -> None:
    minutely = Schedule(cron_expr="* * * * *")
    assert len(range_times(minutely, None, 0, 10 * 60_000, 10)) == 10
    with pytest.raises(BackfillTooLargeError, match="KAIROS_BACKFILL_MAX_RUNS") as refused:
        range_times(minutely, None, 0, 11 * 60_000, 10)
    assert refused.value.field == "from"
    with pytest.raises(BackfillTooLargeError):
        range_times(Schedule(fixed_rate_seconds=1), 0, 0, 10**12, 1000)


def test_times_from_the_next_trigger_on_are_left_to_the_schedule() -> None:
    every_minute = Schedule(cron_expr="* * * * *")
    plan = plan_backfill(every_minute, 5 * 60_000, 0, 8 * 60_000, NOW, 100)
    assert plan.times == [0, 60_000, 120_000, 180_000, 240_000]
    assert plan.left_to_schedule == 3


def test_to_after_now_counts_as_now() -> None:
    every_minute = Schedule(cron_expr="* * * * *")
    plan = plan_backfill(every_minute, None, NOW - 180_000, NOW + 10**9, NOW, 5)
    assert plan.times == [NOW - 180_000, NOW - 120_000, NOW - 60_000]


@pytest.mark.parametrize(
    ("schedule", "from_ms", "to_ms", "field"),
    [
        (Schedule(), 0, 60_000, "jobId"),
        (HOURLY_PARIS, 60_000, 60_000, "to"),
        (HOURLY_PARIS, 60_000, 0, "to"),
        (HOURLY_PARIS, NOW, NOW + 60_000, "from"),
    ],
)
def test_what_cannot_be_backfilled_is_refused_naming_the_field(
    schedule: Schedule, from_ms: int, to_ms: int, field: str
) -> None:
    with pytest.raises(ValidationFailedError) as refused:
        plan_backfill(schedule, None, from_ms, to_ms, NOW, 100)
    assert refused.value.field == field
