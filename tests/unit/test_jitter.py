"""Jitter: the offset a recurring trigger fires late by is a pure function of the job
and the trigger time, inside [0, N) s and spread evenly; the claim's plan fires the
trigger at its jittered time and measures lateness from it."""

from __future__ import annotations

from collections import Counter

import pytest

from common.jitter import jitter_offset_ms, jittered_ms
from common.schedule import MisfirePolicy, Schedule, TriggerPolicy, plan_trigger

MINUTE = 60_000


def test_the_offset_is_the_same_on_every_look() -> None:
    first = [jitter_offset_ms(job, t, 30) for job in range(1, 50) for t in (0, MINUTE, 7)]
    again = [jitter_offset_ms(job, t, 30) for job in range(1, 50) for t in (0, MINUTE, 7)]
    assert first == again


@pytest.mark.parametrize("jitter", [1, 2, 59, 3_600, 86_400])
def test_the_offset_stays_in_range(jitter: int) -> None:
    offsets = [jitter_offset_ms(job, t * MINUTE, jitter) for job in range(200) for t in range(20)]
    assert all(0 <= o < jitter * 1000 for o in offsets)


def test_no_jitter_is_no_offset() -> None:
    assert {jitter_offset_ms(job, 123_456, 0) for job in range(100)} == {0}
    assert jittered_ms(5, 123_456, 0) == 123_456


def test_offsets_spread_evenly_over_jobs_and_over_triggers() -> None:
    # 10,000 jobs at one trigger time, in ten buckets of a 60 s jitter: each bucket
    # within 15 % of its even share (1,000); and one job's triggers move from one to
    # the next rather than repeating one offset.
    buckets = Counter(jitter_offset_ms(job, 0, 60) // 6_000 for job in range(1, 10_001))
    assert sorted(buckets) == list(range(10))
    assert all(850 <= n <= 1_150 for n in buckets.values()), buckets
    one_job = {jitter_offset_ms(42, t * MINUTE, 60) for t in range(100)}
    assert len(one_job) > 90


def _policy(misfire: MisfirePolicy = MisfirePolicy.SKIP) -> TriggerPolicy:
    return TriggerPolicy(Schedule("* * * * *"), misfire, 5_000, 10 * MINUTE, jitter_seconds=50)


def test_a_jittered_trigger_fires_at_its_offset_and_its_next_trigger_is_the_schedules() -> None:
    plan = plan_trigger(_policy(), 10 * MINUTE, 10 * MINUTE - 500, 37_000)
    assert (plan.run, plan.fire_at, plan.next_trigger) == (True, 10 * MINUTE + 37_000, 11 * MINUTE)


def test_lateness_counts_from_the_jittered_time() -> None:
    due = 10 * MINUTE + 37_000
    on_time = plan_trigger(_policy(), 10 * MINUTE, due + 4_999, 37_000)
    assert on_time.run and on_time.fire_at == due + 4_999
    late = plan_trigger(_policy(), 10 * MINUTE, due + 5_001, 37_000)
    assert not late.run
    assert late.reason == "skipped: missed by 5.0 s (misfire policy SKIP)"
    # Without the jitter, the same moment is 42 s late.
    assert "missed by 42.0 s" in str(plan_trigger(_policy(), 10 * MINUTE, due + 5_001).reason)
