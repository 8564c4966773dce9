"""Per-minute activity: what grew is published once, and a p99 read from buckets."""

from __future__ import annotations

import math

import pytest

from common.activity import MINUTE_MS, MinuteActivity, merged_buckets, quantile
from common.loadbalance import WorkerLoad, load_score
from common.states import WorkerState
from common.worker_views import WorkerView

INF = math.inf


def test_a_quantile_is_interpolated_inside_its_bucket() -> None:
    # 100 first attempts: 90 within 0.1 s, 9 more within 0.25 s, 1 more within 0.5 s.
    buckets = ((0.1, 90), (0.25, 99), (0.5, 100), (INF, 100))
    assert quantile(0.5, buckets) == pytest.approx(0.1 * 50 / 90)
    assert quantile(0.99, buckets) == pytest.approx(0.25)
    assert quantile(0.999, buckets) == pytest.approx(0.25 + 0.25 * 0.9)


def test_a_quantile_past_the_last_bound_is_infinite_and_none_counted_is_none() -> None:
    assert quantile(0.99, ((10.0, 50), (INF, 100))) == INF
    assert quantile(0.99, ((10.0, 0), (INF, 0))) is None
    assert quantile(0.99, ()) is None


def test_minutes_add_up_bucket_by_bucket_and_failures_count_every_bad_outcome() -> None:
    a = MinuteActivity(0, {"SUCCEEDED": 5, "FAILED": 1, "LOST": 1}, ((0.1, 3), (INF, 4)))
    b = MinuteActivity(MINUTE_MS, {"TIMED_OUT": 2}, ((0.1, 1), (INF, 1)))
    assert merged_buckets([a, b]) == ((0.1, 4), (INF, 5))
    assert (a.succeeded, a.failed, b.failed) == (5, 2, 2)


def test_the_score_parts_add_up_to_the_dispatchers_score() -> None:
    worker = WorkerView(
        "w1",
        "h",
        1,
        WorkerState.ACTIVE,
        8,
        active=2,
        overrun=0,
        queued=3,
        cpu_idle=40,
        avg_ms=1500,
        handlers=(),
        age_ms=0,
        stale=False,
    )
    parts = worker.score
    assert (parts.runs, parts.avg_run, parts.cpu) == (50, 1.5, 6.0)
    assert parts.total == load_score(WorkerLoad("w1", 5, 1500, 40, frozenset()))
