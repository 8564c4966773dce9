"""Choosing a worker: the equal-cost score and the three strategies."""

from __future__ import annotations

from collections import Counter

import pytest

from common.loadbalance import Strategy, WorkerChooser, WorkerLoad, load_score

ECHO = "demo.echo"


def _worker(
    worker_id: str,
    active: int = 0,
    avg_ms: float = 0.0,
    cpu_idle: float = 100.0,
    handlers: frozenset[str] = frozenset({ECHO}),
) -> WorkerLoad:
    return WorkerLoad(worker_id, active, avg_ms, cpu_idle, handlers)


def _picks(chooser: WorkerChooser, workers: list[WorkerLoad], count: int) -> list[str]:
    picked = [chooser.choose(workers, ECHO) for _ in range(count)]
    return [w.worker_id for w in picked if w is not None]


@pytest.mark.parametrize(
    ("active", "avg_ms", "cpu_idle", "score"),
    [
        (0, 0.0, 100.0, 0.0),
        (1, 0.0, 100.0, 10.0),
        (0, 2500.0, 100.0, 2.5),
        (0, 0.0, 40.0, 6.0),
        (2, 1500.0, 40.0, 27.5),
        (3, 250.0, 0.0, 40.25),
    ],
)
def test_load_score_is_active_times_ten_plus_seconds_plus_busy_tenths(
    active: int, avg_ms: float, cpu_idle: float, score: float
) -> None:
    assert load_score(_worker("w", active, avg_ms, cpu_idle)) == pytest.approx(score)


def test_equal_cost_picks_the_lowest_score() -> None:
    workers = [
        _worker("a", active=2),
        _worker("b", active=1, cpu_idle=50.0),
        _worker("c", active=1, avg_ms=4000.0),
    ]
    chosen = WorkerChooser().choose(workers, ECHO)
    assert chosen is workers[2]


def test_equal_cost_is_the_default_strategy() -> None:
    workers = [_worker("a", active=1), _worker("b")]
    assert _picks(WorkerChooser(), workers, 1) == ["b"]


def test_a_pick_counts_as_one_more_active_task() -> None:
    worker = _worker("a", active=3)
    WorkerChooser().choose([worker], ECHO)
    assert worker.active == 4


def test_equal_cost_spreads_a_batch_evenly_over_equal_workers() -> None:
    workers = [_worker("a"), _worker("b"), _worker("c")]
    picks = _picks(WorkerChooser(Strategy.EQUAL_COST), workers, 9)
    assert Counter(picks) == {"a": 3, "b": 3, "c": 3}
    assert len(set(picks[:3])) == 3
    assert [w.active for w in workers] == [3, 3, 3]


def test_equal_cost_fills_the_idle_worker_before_sharing() -> None:
    workers = [_worker("busy", active=2), _worker("idle")]
    picks = _picks(WorkerChooser(), workers, 4)
    assert picks[:2] == ["idle", "idle"]
    assert Counter(picks) == {"idle": 3, "busy": 1}


def test_equal_cost_breaks_ties_by_worker_id() -> None:
    workers = [_worker("b"), _worker("a")]
    assert _picks(WorkerChooser(), workers, 1) == ["a"]


def test_workers_lacking_the_handler_are_skipped() -> None:
    other = frozenset({"demo.sleep"})
    workers = [_worker("a", handlers=other), _worker("b", active=5)]
    assert _picks(WorkerChooser(), workers, 2) == ["b", "b"]
    assert workers[0].active == 0


@pytest.mark.parametrize("strategy", list(Strategy))
def test_no_worker_with_the_handler_gives_none(strategy: Strategy) -> None:
    workers = [_worker("a", handlers=frozenset({"demo.sleep"}))]
    chooser = WorkerChooser(strategy, seed=1)
    assert chooser.choose(workers, ECHO) is None
    assert chooser.choose([], ECHO) is None
    assert workers[0].active == 0


def test_round_robin_gives_each_worker_a_turn_regardless_of_load() -> None:
    workers = [_worker("a", active=50), _worker("b"), _worker("c", cpu_idle=0.0)]
    picks = _picks(WorkerChooser(Strategy.ROUND_ROBIN), workers, 6)
    assert sorted(picks[:3]) == ["a", "b", "c"]
    assert picks[3:] == picks[:3]


def test_round_robin_skips_workers_lacking_the_handler() -> None:
    workers = [_worker("a"), _worker("b", handlers=frozenset()), _worker("c")]
    picks = _picks(WorkerChooser(Strategy.ROUND_ROBIN), workers, 4)
    assert Counter(picks) == {"a": 2, "c": 2}


def test_random_with_the_same_seed_repeats_its_choices() -> None:
    first = _picks(WorkerChooser(Strategy.RANDOM, seed=7), [_worker(i) for i in "abcd"], 20)
    again = _picks(WorkerChooser(Strategy.RANDOM, seed=7), [_worker(i) for i in "abcd"], 20)
    assert first == again


def test_random_reaches_every_able_worker_and_only_those() -> None:
    workers = [_worker("a"), _worker("b"), _worker("c"), _worker("x", handlers=frozenset())]
    picks = _picks(WorkerChooser(Strategy.RANDOM, seed=3), workers, 60)
    assert set(picks) == {"a", "b", "c"}


def test_strategy_names_match_the_setting_values() -> None:
    assert [Strategy(s) for s in ("equal_cost", "round_robin", "random")] == list(Strategy)
