"""A worker's fence: closed while no heartbeat has landed for two intervals."""

from __future__ import annotations

from services.worker.fence import FENCE_AFTER_BEATS, Fence, minimum_stale_ms
from services.worker.incarnation import wait_for_no_consumer


def test_the_fence_closes_after_two_intervals_without_a_heartbeat_and_reopens() -> None:
    now = [100.0]
    fence = Fence(interval=5.0, clock=lambda: now[0])
    assert not fence.closed
    now[0] = 110.0
    assert not fence.closed  # exactly two intervals: still open
    now[0] = 110.1
    assert fence.closed
    assert fence.heard() is True  # this heartbeat reopened it
    assert not fence.closed
    assert fence.heard() is False


def test_the_leaders_staleness_limit_leaves_a_beat_of_margin() -> None:
    assert FENCE_AFTER_BEATS == 2
    assert minimum_stale_ms(5.0) == 15_000  # the defaults: 5 s heartbeats, 15 s stale


def test_a_starting_worker_waits_for_its_previous_consumer_to_leave_then_gives_up() -> None:
    counts = [1, 1, 0]
    assert wait_for_no_consumer(lambda: counts.pop(0), seconds=5, poll=0)
    assert not wait_for_no_consumer(lambda: 1, seconds=0, poll=0)
