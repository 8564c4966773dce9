"""How many executions a worker's queue may hold: its capacity plus what it starts soon."""

from __future__ import annotations

import pytest

from common.loadbalance import WorkerChooser, WorkerLoad
from common.slots import (
    MOST_QUEUED,
    RESULTS_LAG_MS,
    ResultsLag,
    SlowRuns,
    TurnoverMeter,
    handler_paces,
    peer_pace_ms,
    queue_bound,
    run_cost,
)


def test_a_worker_of_unknown_speed_holds_one_more_run_per_slot() -> None:
    assert queue_bound(8, avg_ms=0, rate_per_s=0, horizon_ms=1_000) == 16


def test_slow_runs_bound_the_queue_to_a_second_of_work() -> None:
    assert queue_bound(8, avg_ms=500, rate_per_s=0, horizon_ms=1_000) == 8 + 16
    assert queue_bound(8, avg_ms=10_000, rate_per_s=0, horizon_ms=1_000) == 9
    assert queue_bound(8, avg_ms=500, rate_per_s=900, horizon_ms=1_000) == 24, "timed runs win"


def test_runs_whose_results_are_on_their_way_count_in_flight_beyond_the_horizon() -> None:
    # A 10 ms run: 16 slots start 1,600 a second, and finish 320 within a 200 ms lag
    # that the leader's in-flight count still holds as queued.
    assert queue_bound(16, avg_ms=10, rate_per_s=0, horizon_ms=1_000) == 16 + 1_600
    lagged = queue_bound(16, avg_ms=10, rate_per_s=0, horizon_ms=1_000, results_lag_ms=200)
    assert lagged == 16 + 1_600 + 320


def test_the_results_lag_is_an_average_of_batches_held_to_the_allowance() -> None:
    lag = ResultsLag()
    assert lag.ms() == 0
    lag.observe([100, 300])
    assert lag.ms() == 0.3 * 200
    lag.observe([])
    assert lag.ms() == 0.3 * 200, "a batch without results says nothing"
    for _ in range(50):
        lag.observe([10 * RESULTS_LAG_MS, -5])  # a result redelivered long after
    assert 0.99 * RESULTS_LAG_MS <= lag.ms() <= RESULTS_LAG_MS
    meter = TurnoverMeter(results_lag=lag)
    meter.observe("w1", 0, at_s=0.0)
    assert meter.bound("w1", 16, avg_ms=10) == queue_bound(16, 10, 0, 1_000, lag.ms())


def test_fast_workers_may_hold_what_they_turn_over_in_the_horizon() -> None:
    assert queue_bound(8, avg_ms=0, rate_per_s=3_000, horizon_ms=1_000) == 8 + 3 * 3_000
    assert queue_bound(8, avg_ms=0, rate_per_s=1e9, horizon_ms=1_000) == MOST_QUEUED


def test_turnover_is_measured_from_the_in_flight_count_and_what_was_sent() -> None:
    meter = TurnoverMeter()
    meter.observe("w1", 16, at_s=0.0)
    meter.sent("w1", 100)
    assert meter.observe("w1", 16, at_s=0.5) == 200.0  # 100 finished in 0.5 s
    assert meter.bound("w1", 8, avg_ms=0) == 8 + 3 * 200


def test_a_span_too_short_carries_its_sends_to_the_next_look() -> None:
    meter = TurnoverMeter()
    meter.observe("w1", 0, at_s=0.0)
    meter.sent("w1", 50)
    assert meter.observe("w1", 10, at_s=0.05) == 0.0
    assert meter.observe("w1", 10, at_s=0.5) == 80.0  # 40 of the 50 finished in 0.5 s


def test_sends_reported_late_are_owed_not_read_as_a_burst() -> None:
    meter = TurnoverMeter()
    meter.observe("w1", 8, at_s=0.0)
    meter.sent("w1", 8)
    meter.observe("w1", 8, at_s=1.0)  # 8 finished a second
    # 100 sends show in the count before they are reported, then are reported.
    assert meter.observe("w1", 100, at_s=2.0) == 8 * 0.5  # none finished, as it looks
    meter.sent("w1", 100)
    rate = meter.observe("w1", 92, at_s=3.0)
    assert rate <= 16, "the late report did not read as a hundred runs finished"


def test_one_span_says_at_most_eight_times_the_last_speed() -> None:
    meter = TurnoverMeter()
    meter.observe("w1", 10, at_s=0.0)
    meter.sent("w1", 10)
    meter.observe("w1", 10, at_s=1.0)  # 10 a second
    meter.sent("w1", 1_000)
    assert meter.observe("w1", 10, at_s=2.0) == 0.5 * 80 + 0.5 * 10


def test_an_idle_worker_keeps_the_speed_it_showed() -> None:
    meter = TurnoverMeter()
    meter.observe("w1", 10, at_s=0.0)
    fast = meter.observe("w1", 0, at_s=0.5)
    assert meter.observe("w1", 0, at_s=5.0) == fast


def test_the_chooser_picks_only_workers_with_room_and_counts_the_pick() -> None:
    full = WorkerLoad("w1", 0, 0.0, 100.0, frozenset({"h"}), room=0)
    free = WorkerLoad("w2", 5, 0.0, 100.0, frozenset({"h"}), room=1)
    chooser = WorkerChooser()
    assert chooser.choose([full, free], "h") is free
    assert (free.room, free.picked) == (0, 1)
    assert chooser.choose([full, free], "h") is None


def test_a_worker_that_timed_no_run_takes_the_slowest_timed_peers_pace() -> None:
    assert peer_pace_ms([0, 4, 10, 0]) == 10
    assert peer_pace_ms([0, 0]) == 0, "no peer timed a run"
    meter = TurnoverMeter()
    meter.observe("new", 0, at_s=0.0)
    assert meter.bound("new", 16, avg_ms=0, peers_ms=10) == queue_bound(16, 10, 0, 1_000)
    assert meter.bound("new", 16, avg_ms=0, peers_ms=0) == 32, "nothing known: a run a slot"
    assert meter.bound("new", 16, avg_ms=500, peers_ms=10) == 16 + 32, "its own pace wins"


def test_a_worker_with_a_measured_turnover_keeps_it_over_its_peers_pace() -> None:
    meter = TurnoverMeter()
    meter.observe("w1", 16, at_s=0.0)
    meter.sent("w1", 100)
    meter.observe("w1", 16, at_s=0.5)
    assert meter.bound("w1", 8, avg_ms=0, peers_ms=1) == 8 + 3 * 200


def test_a_run_takes_the_places_its_handlers_time_holds() -> None:
    assert run_cost(500, unit_ms=1, horizon_ms=1_000) == 500
    assert run_cost(1, unit_ms=20, horizon_ms=1_000) == 1, "a quick run takes one place"
    assert run_cost(None, unit_ms=2, horizon_ms=1_000) == 500, "an untimed handler: the horizon"
    assert run_cost(None, unit_ms=0, horizon_ms=1_000) == 1, "a bound not counted in time"


def test_a_handlers_pace_is_the_slowest_worker_that_timed_it() -> None:
    assert handler_paces([{"a": 3, "b": 10}, {"a": 7}, {}]) == {"a": 7, "b": 10}


def test_slow_runs_hold_their_places_until_they_leave_the_queue_in_order() -> None:
    held = SlowRuns()
    held.sent("w1", 4, 0.0)  # four quick runs first
    held.sent("w1", 2, 1_000.0)  # then two slow ones, 500 ms beyond a place each
    assert held.settle("w1", inflight=6) == 1_000.0
    assert held.settle("w1", inflight=3) == 1_000.0, "the quick ones left first"
    assert held.settle("w1", inflight=1) == 500.0
    assert held.settle("w1", inflight=0) == 0.0
    assert held.settle("w1", inflight=5) == 0.0, "runs it never saw sent hold nothing extra"


@pytest.mark.timeout(5)
def test_settling_a_part_of_a_send_ends_whatever_the_rounding() -> None:
    """Parts of sends in floating point can leave a remainder too small to take a part
    of; settling must end there, not loop for good (it held a dispatcher's loop at
    30,000 jobs)."""
    held = SlowRuns()
    held.sent("w1", 108, 10.0)
    held.settle("w1", inflight=36)
    held.sent("w1", 122, 10.0)
    assert held.settle("w1", inflight=118) >= 0.0


def test_a_queue_counted_afresh_holds_todays_prices_until_its_runs_leave() -> None:
    held = SlowRuns()
    held.sent("w1", 10, 0.0)  # ten runs sent as quick; their handler then grew slow
    held.reprice("w1", 4, 2_000.0)  # six recalled; the four left take 500 ms more each
    assert held.settle("w1", inflight=4) == 2_000.0
    assert held.settle("w1", inflight=2) == 1_000.0
    held.reprice("w1", 0, 0.0)
    assert held.settle("w1", inflight=3) == 0.0
    held.reprice("w2", 2, 300.0)  # a worker nothing was counted of (a new leader)
    assert held.settle("w2", inflight=2) == 300.0


def test_a_worker_gone_from_the_view_holds_nothing() -> None:
    held = SlowRuns()
    held.sent("w1", 1, 900.0)
    held.sent("w2", 1, 900.0)
    held.forget_except(["w2"])
    assert (held.settle("w1", 1), held.settle("w2", 1)) == (0.0, 900.0)


def test_the_chooser_takes_a_slow_runs_places_and_lets_one_go_into_any_room() -> None:
    worker = WorkerLoad("w1", 0, 1.0, 100.0, frozenset({"quick", "slow"}), room=3)
    worker.costs = {"slow": 2}
    chooser = WorkerChooser()
    assert chooser.choose([worker], "slow") is worker
    assert (worker.room, worker.picked, worker.picked_extra) == (1, 1, 1)
    assert chooser.choose([worker], "slow") is worker, "one place left: it still goes"
    assert worker.room == -1
    assert chooser.choose([worker], "quick") is None
