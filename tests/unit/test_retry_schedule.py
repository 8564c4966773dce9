"""The callback retry schedule: tiers spread over delay buckets, Retry-After honoured
(capped), DEAD after the last tier, and what each answer means."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from common.states import DeadReason, DeliveryStatus
from services.notifier.posting import PostOutcome
from services.notifier.retry_after import retry_after_seconds
from services.notifier.schedule import RetrySchedule, spread
from services.notifier.verdict import judge

DEFAULT = [5, 300, 1800, 7200, 18000, 36000, 36000]


def test_the_default_schedule_lasts_about_a_day_and_a_bit() -> None:
    assert sum(DEFAULT) / 3600 == pytest.approx(27.6, abs=0.1)
    assert RetrySchedule(DEFAULT).last_attempt == 8


def test_each_tier_is_spread_a_fifth_either_side() -> None:
    assert spread(5_000, 0.2) == [4_000, 4_500, 5_000, 5_500, 6_000]
    assert spread(300_000, 0.2) == [240_000, 270_000, 300_000, 330_000, 360_000]
    assert spread(1_000, 0.2) == [800, 900, 1_000, 1_100, 1_200]


def test_no_jitter_is_one_bucket_per_tier() -> None:
    assert RetrySchedule([1, 2], 0).all_delays()[:2] == [1_000, 2_000]
    assert spread(2_000, 0) == [2_000]


def test_a_thousand_failures_in_one_instant_come_back_spread() -> None:
    schedule = RetrySchedule(DEFAULT, rng=random.Random(7))
    drawn = Counter(schedule.delay_after(2) for _ in range(1_000))
    assert set(drawn) == set(spread(300_000, 0.2))
    assert max(drawn.values()) < 300, "no bucket takes much more than its fifth"


def test_the_attempt_after_the_last_tier_is_the_last() -> None:
    schedule = RetrySchedule([1, 2], 0)
    assert schedule.delay_after(1) == 1_000
    assert schedule.delay_after(2) == 2_000
    assert schedule.delay_after(3) is None


@pytest.mark.parametrize(
    ("asked", "delay_ms"),
    [(0, 1_000), (1, 1_000), (3, 5_000), (61, 120_000), (3_600, 3_600_000), (99_999, 3_600_000)],
)
def test_retry_after_rounds_up_to_a_rung_and_is_capped(asked: float, delay_ms: int) -> None:
    assert RetrySchedule(DEFAULT).retry_after(asked) == delay_ms


def test_a_lower_cap_is_a_rung_of_its_own() -> None:
    schedule = RetrySchedule([1], retry_after_cap_seconds=45)
    assert schedule.retry_after(40) == 45_000
    assert max(schedule.rungs()) == 45_000


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT
    assert retry_after_seconds("120", now) == 120
    assert retry_after_seconds("Tue, 14 Nov 2023 22:14:20 GMT", now) == 60
    assert retry_after_seconds("Tue, 14 Nov 2023 22:00:00 GMT", now) == 0
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds("-5", now) is None
    assert retry_after_seconds(None, now) is None


SCHEDULE = RetrySchedule([1, 2], 0)


def test_only_2xx_delivers() -> None:
    for code in (200, 204, 299):
        assert judge(PostOutcome(code, None), 1, SCHEDULE, 0).status is DeliveryStatus.DELIVERED
    for code in (100, 301, 302, 304, 400, 500):
        verdict = judge(PostOutcome(code, "x"), 1, SCHEDULE, 0)
        assert verdict.status is DeliveryStatus.RETRYING and verdict.delay_ms == 1_000


def test_410_is_dead_at_once_as_gone() -> None:
    verdict = judge(PostOutcome(410, "gone"), 1, SCHEDULE, 0)
    assert verdict.status is DeliveryStatus.DEAD and verdict.dead_reason is DeadReason.GONE


@pytest.mark.parametrize("code", [429, 503])
def test_429_and_503_wait_as_asked(code: int) -> None:
    verdict = judge(PostOutcome(code, "busy", retry_after="30"), 1, SCHEDULE, 0)
    assert verdict.status is DeliveryStatus.RETRYING and verdict.delay_ms == 30_000


def test_retry_after_on_another_code_is_not_honoured() -> None:
    assert judge(PostOutcome(500, "x", retry_after="30"), 1, SCHEDULE, 0).delay_ms == 1_000


def test_after_the_last_tier_a_failure_is_dead_even_asked_to_wait() -> None:
    verdict = judge(PostOutcome(503, "x", retry_after="1"), 3, SCHEDULE, 0)
    assert verdict.status is DeliveryStatus.DEAD
    assert verdict.dead_reason is DeadReason.EXHAUSTED


def test_no_answer_waits_the_tier() -> None:
    verdict = judge(PostOutcome(None, "timeout"), 2, SCHEDULE, 0)
    assert verdict.status is DeliveryStatus.RETRYING and verdict.delay_ms == 2_000


def test_a_url_the_policy_refuses_is_dead_at_once_as_refused() -> None:
    verdict = judge(PostOutcome(None, "refused by the callback URL policy", True), 1, SCHEDULE, 0)
    assert verdict.status is DeliveryStatus.DEAD and verdict.dead_reason is DeadReason.REFUSED
