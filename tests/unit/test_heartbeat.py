"""The heartbeat's average run time over a recent window."""

from __future__ import annotations

from collections import deque

from common.consumer.stats import ConsumerStats
from services.worker.heartbeat import AVERAGE_WINDOW_SECONDS, average_ms, handler_ms, outgrown


def _stats(*durations: tuple[float, float]) -> ConsumerStats:
    return ConsumerStats(durations=deque(durations))


def test_no_runs_average_zero() -> None:
    assert average_ms(ConsumerStats(), now=1000.0) == 0


def test_average_is_the_mean_in_milliseconds() -> None:
    assert average_ms(_stats((990.0, 0.25), (995.0, 0.75)), now=1000.0) == 500


def test_only_runs_within_the_window_count() -> None:
    stats = _stats((600.0, 9.0), (800.0, 0.25), (950.0, 0.75))
    assert average_ms(stats, now=1000.0, window=300.0) == 500


def test_a_run_exactly_at_the_window_edge_counts() -> None:
    stats = _stats((700.0, 1.0), (699.5, 100.0))
    assert average_ms(stats, now=1000.0, window=300.0) == 1000


def test_runs_all_older_than_the_window_average_zero() -> None:
    assert average_ms(_stats((10.0, 2.0), (20.0, 4.0)), now=1000.0, window=60.0) == 0


def test_default_window_is_five_minutes() -> None:
    assert AVERAGE_WINDOW_SECONDS == 300.0
    stats = _stats((1000.0 - 301.0, 8.0), (1000.0 - 299.0, 2.0))
    assert average_ms(stats, now=1000.0) == 2000


def test_average_truncates_to_whole_milliseconds() -> None:
    assert average_ms(_stats((999.0, 0.0015625)), now=1000.0) == 1


def test_average_leaves_the_stats_untouched() -> None:
    stats = _stats((600.0, 9.0), (950.0, 0.5))
    average_ms(stats, now=1000.0, window=300.0)
    assert list(stats.durations) == [(600.0, 9.0), (950.0, 0.5)]


def test_runs_shorter_than_a_millisecond_average_one_not_none() -> None:
    assert average_ms(_stats((999.0, 0.0002), (999.5, 0.0001)), now=1000.0) == 1


def test_each_handler_reads_the_mean_of_its_own_runs_in_the_window() -> None:
    stats = ConsumerStats()
    stats.timed(1.0, 9.0, "old")
    for n in range(4):
        stats.timed(600.0 + n, 0.001, "quick")
        stats.timed(600.0 + n, 0.5, "slow")
    assert handler_ms(stats, now=610.0) == {"quick": 1, "slow": 500}, "'old' left the window"
    assert len(stats.durations) == 9


def test_a_worker_of_one_handler_reads_the_same_time_for_it_as_for_all_its_runs() -> None:
    # The leader prices a run by its handler's time over the worker's average: one
    # handler must cost one place, whatever the rounding.
    stats = ConsumerStats()
    for n in range(50):
        stats.timed(100.0 + n, 0.0004 + n * 0.00007, "demo.noop")
    assert handler_ms(stats, now=200.0) == {"demo.noop": average_ms(stats, now=200.0)}


def test_runs_going_longer_than_their_handlers_mean_raise_the_handlers_time() -> None:
    stats = ConsumerStats()
    for n in range(1000):
        stats.timed(100.0 + n * 0.001, 0.001, "demo.sleep")
    stats.timed(101.0, 0.002, "demo.noop")
    running = {"demo.sleep": 0.75, "demo.noop": 0.0001}
    assert handler_ms(stats, now=102.0, running=running) == {"demo.sleep": 750, "demo.noop": 2}


def test_a_run_just_begun_never_lowers_a_handlers_time() -> None:
    stats = ConsumerStats()
    stats.timed(100.0, 0.5, "slow")
    assert handler_ms(stats, now=101.0, running={"slow": 0.01}) == {"slow": 500}


def test_a_handler_never_timed_stays_out_while_its_first_run_goes() -> None:
    # Left out, the leader prices it at its whole horizon; a run begun 10 ms ago would
    # price it at 10 ms.
    assert handler_ms(ConsumerStats(), now=1.0, running={"new": 0.01}) == {}


def test_a_run_outgrows_its_handler_at_twice_its_time_and_50_ms_more() -> None:
    assert not outgrown({"h": 2}, {"h": 0.051})
    assert outgrown({"h": 2}, {"h": 0.052})
    assert not outgrown({"h": 100}, {"h": 0.199})
    assert outgrown({"h": 100}, {"h": 0.2})
    assert not outgrown({}, {"h": 9.0}), "a handler never reported is priced at the horizon"
    assert not outgrown({"h": 2}, {})


def test_a_handler_grown_slow_reads_the_time_of_its_latest_runs() -> None:
    # A thousand quick runs in the window hold its mean near 1 ms for minutes; between
    # two turnovers its runs going have only just begun, so only its latest runs ended
    # say what a run takes now.
    stats = ConsumerStats()
    for n in range(1000):
        stats.timed(100.0 + n * 0.001, 0.001, "demo.sleep")
    for n in range(8):
        stats.timed(102.0 + n * 0.1, 0.5, "demo.sleep")
    assert handler_ms(stats, now=103.0, running={"demo.sleep": 0.01}) == {"demo.sleep": 500}


def test_steady_runs_of_one_handler_read_the_mean_of_the_window() -> None:
    # Latest runs a little slower than the window's mean are noise: a worker of one
    # handler must still price its runs at one place each.
    stats = ConsumerStats()
    for n in range(100):
        stats.timed(100.0 + n, 0.1 + (n % 10) * 0.01, "demo.echo")
    assert handler_ms(stats, now=200.0) == {"demo.echo": average_ms(stats, now=200.0)}
