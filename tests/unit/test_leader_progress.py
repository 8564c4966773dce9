"""A leader gives its lease up when one of its loops stalls, and takes it again only
once the loop is back."""

from __future__ import annotations

from typing import cast

from services.dispatcher.leadership.lease import RedisLease
from services.dispatcher.leadership.lease_thread import Leadership, default_stall_ms
from services.dispatcher.leadership.progress import LoopProgress


class FakeLease:
    """A lease nobody else wants: acquire and renew succeed, release is counted."""

    ttl_ms = 3_000

    def __init__(self) -> None:
        self.held = False
        self.renewals = 0
        self.releases = 0

    def acquire(self) -> bool:
        self.held = True
        return True

    def renew(self) -> bool:
        self.renewals += 1
        return self.held

    def release(self) -> bool:
        self.releases += 1
        self.held = False
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def leadership() -> tuple[Leadership, FakeLease, Clock]:
    lease, clock = FakeLease(), Clock()
    progress = LoopProgress(clock)
    return Leadership(cast(RedisLease, lease), progress, clock=clock), lease, clock


def test_renews_while_the_loops_beat() -> None:
    leader, lease, clock = leadership()
    leader._step()
    assert leader.is_leader.is_set()
    for _ in range(10):
        leader.progress.beat("dispatch")
        clock.now += 1.0
        leader._step()
    assert leader.is_leader.is_set()
    assert lease.renewals == 10
    assert lease.releases == 0


def test_a_stalled_loop_releases_the_lease_and_keeps_it_released() -> None:
    leader, lease, clock = leadership()
    leader._step()
    leader.progress.beat("dispatch")
    leader.progress.beat("claim")
    clock.now += default_stall_ms(lease.ttl_ms) / 1000 + 0.1
    leader.progress.beat("claim")  # the claim loop moves; the dispatch loop hangs
    leader._step()
    assert not leader.is_leader.is_set()
    assert lease.releases == 1
    clock.now += 60
    leader._step()  # still hung: the lease stays with whoever took it
    assert not leader.is_leader.is_set()
    assert not lease.held
    leader.progress.forget("dispatch")  # the hung loop came back and stopped leading
    leader.progress.forget("claim")
    leader._step()
    assert leader.is_leader.is_set()


def test_no_loop_leading_stalls_nothing() -> None:
    progress = LoopProgress(Clock())
    assert progress.stalled(0.0) is None


def test_a_process_not_ready_to_lead_takes_no_lease() -> None:
    """A dispatcher still winding down its last lead (joining its threads) or not yet
    waiting for the next takes no lease: it would hold it with nothing dispatching."""
    leader, lease, _ = leadership()
    leader.ready.clear()
    leader._step()
    assert not leader.is_leader.is_set() and not lease.held
    leader.ready.set()
    leader._step()
    assert leader.is_leader.is_set()


def test_readiness_says_so_once_a_stepped_down_dispatcher_cannot_try_for_a_lease_life() -> None:
    leader, lease, clock = leadership()
    leader._step()
    leader.ready.clear()  # leading: the dispatch loop is busy with the lead
    leader.progress.beat("dispatch")
    assert leader.readiness() == "ok"
    clock.now += default_stall_ms(lease.ttl_ms) / 1000 + 0.1
    leader._step()  # stalled: steps down
    assert not leader.is_leader.is_set()
    leader._step()
    assert leader.readiness() == "ok", "a lease's lifetime to come back first"
    clock.now += lease.ttl_ms / 1000 + 1
    leader._step()
    why = leader.readiness()
    assert why.startswith("not leading, and cannot take the lease for ")
    assert "dispatch loop" in why
    leader.progress.forget("dispatch")  # the loop came back, still winding down
    leader._step()
    assert "not waiting for the lease" in leader.readiness()
    leader.ready.set()
    leader._step()
    assert leader.is_leader.is_set() and leader.readiness() == "ok"
    leader.is_leader.clear()  # a later step-down counts its time afresh
    assert leader.readiness() == "ok"


def test_step_down_releases_the_lease_and_stops_leading() -> None:
    leader, lease, _ = leadership()
    leader._step()
    leader.step_down("the dispatch loop failed")
    assert not leader.is_leader.is_set() and not lease.held and lease.releases == 1
    leader.step_down("again")
    assert lease.releases == 1, "nothing to release twice"


class BrokenOnce(FakeLease):
    """A lease whose first acquire fails in a way nobody planned for."""

    ttl_ms = 30

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0

    def acquire(self) -> bool:
        self.tries += 1
        if self.tries == 1:
            raise ValueError("unexpected")
        return super().acquire()


def test_the_lease_thread_outlives_an_unexpected_error() -> None:
    lease = BrokenOnce()
    leader = Leadership(cast(RedisLease, lease))
    leader.start()
    try:
        assert leader.is_leader.wait(10), "the lease thread died with the error"
    finally:
        leader.stop()
