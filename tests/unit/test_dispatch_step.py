"""One pass of the dispatch loop against a claim handed over mid-pass."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest

from common.config import DispatcherSettings
from services.dispatcher.main import Dispatcher, _Leading, _Timers


class Nothing:
    """Stands in for every part of the loop that has no work in this test."""

    def sweep(self, _leading_still: Any = None) -> None: ...
    def live(self) -> list[Any]:
        return []

    def load(self) -> int:
        return 0

    def add(self, _keys: list[int]) -> int:
        return 0

    def needs_load(self) -> bool:
        return False

    def fire_due(self) -> int:
        return 0

    def newly_due(self) -> bool:
        return False

    def waiting(self) -> int:
        return 0

    def claims_hold_off(self) -> bool:
        return False

    apps: dict[int, Any] = {}  # noqa: RUF012

    def warm_up(self) -> None: ...
    def next_wake(self) -> None:
        return None

    def process_data_events(self, _timeout: float) -> None: ...


class Claims:
    def __init__(self) -> None:
        self.claimed = threading.Event()
        self.passes = 0
        self.handlers: frozenset[str] = frozenset()
        # Execution ids the claims wrote SCHEDULED, not yet taken by the loop.
        self.scheduled: list[int] = []

    def one_pass(self) -> None:
        """What the claim thread does after a claim that found due jobs."""
        self.passes += 1
        self.claimed.set()


class LateSender:
    """The claim thread queues an open claim (and sets ``claimed``) just after the
    dispatch loop has looked at the queue."""

    def __init__(self, claims: Claims) -> None:
        self.workers: tuple[Any, ...] = ()
        self.queued = 0
        self.sent = 0
        self._claims = claims

    def send_ready(self, _publisher: Any) -> int:
        self.sent += self.queued
        self.queued = 0
        if self.sent == 0:
            self.queued = 1
            self._claims.one_pass()
        return 0

    def take_scheduled(self) -> list[int]:
        return []


class QuietSender:
    def __init__(self, claims: Claims) -> None:
        self.workers: tuple[Any, ...] = ()
        self._claims = claims

    def send_ready(self, _publisher: Any) -> int:
        return 0

    def take_scheduled(self) -> list[int]:
        taken, self._claims.scheduled = self._claims.scheduled, []
        return taken


class Loads(Nothing):
    def __init__(self) -> None:
        self.loads = 0
        self.added: list[int] = []

    def load(self) -> int:
        self.loads += 1
        return 0

    def add(self, keys: list[int]) -> int:
        self.added += keys
        return len(keys)


class ClaimedAsItIsRead(threading.Event):
    """A claim pass lands just as the dispatch loop reads the event."""

    def __init__(self, claims: Claims) -> None:
        super().__init__()
        self._claims = claims
        self.armed = False

    def is_set(self) -> bool:
        was = super().is_set()
        self._land()
        return was

    def clear(self) -> None:
        self._land()
        super().clear()

    def _land(self) -> None:
        if self.armed:
            self.armed = False
            self._claims.passes += 1
            self._claims.scheduled.append(7)
            super().set()


def leading_with(claims: Claims, sender: Any, firer: Any) -> _Leading:
    nothing = Nothing()
    return _Leading(
        connection=cast(Any, nothing),
        directory=cast(Any, nothing),
        claims=cast(Any, claims),
        sender=cast(Any, sender),
        publisher=cast(Any, None),
        firer=cast(Any, firer),
        upkeep=cast(Any, nothing),
        retention=cast(Any, nothing),
        leading_still=lambda: True,
    )


def dispatcher() -> Dispatcher:
    made = Dispatcher.__new__(Dispatcher)
    made.settings = DispatcherSettings()
    return made


def test_a_claim_handed_over_during_a_pass_ends_the_next_sleep_at_once() -> None:
    claims = Claims()
    sender = LateSender(claims)
    leading = leading_with(claims, sender, Nothing())
    timers = _Timers(next_sweep=time.monotonic() + 60)
    claims.claimed.set()  # the claim before
    step = dispatcher()._step
    wait = step(leading, timers)
    assert sender.queued == 1
    # The loop sleeps on ``claimed``: it must still be set, or the claim waits a scan.
    assert claims.claimed.wait(max(0.0, min(wait, 0.05)))
    step(leading, timers)
    assert sender.sent == 1


def test_a_claim_pass_landing_as_the_loop_reads_the_wake_up_is_held() -> None:
    claims = Claims()
    event = ClaimedAsItIsRead(claims)
    claims.claimed = event
    firer = Loads()
    leading = leading_with(claims, QuietSender(claims), firer)
    timers = _Timers(next_sweep=time.monotonic() + 60, next_load=time.monotonic() + 60)
    event.armed = True
    wait = dispatcher()._step(leading, timers)
    # Its SCHEDULED rows are held now, or the sleep ends at once to hold them.
    assert firer.added == [7] or claims.claimed.wait(max(0.0, min(wait, 0.05)))
    # Held by key: no load until the timer's.
    assert firer.loads == 0


class DueAtALoad(Nothing):
    """A batch is due just as the load timer is: what the pass does, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.due = 1

    def load(self) -> int:
        self.calls.append("load")
        return 0

    def fire_due(self) -> int:
        sent, self.due = self.due, 0
        self.calls.append(f"fire:{sent}")
        return sent

    def newly_due(self) -> bool:
        return self.due > 0

    def sweep(self, _leading_still: Any = None) -> None:
        self.calls.append("sweep")


def test_a_batch_due_now_is_fired_before_the_upkeep_and_a_load_due_too() -> None:
    claims = Claims()
    firer = DueAtALoad()
    made = dispatcher()
    made.progress = cast(Any, type("Beats", (), {"beat": lambda self, _name: None})())
    leading = leading_with(claims, QuietSender(claims), firer)
    leading.upkeep = cast(Any, firer)
    timers = _Timers(next_sweep=0.0, next_load=0.0)
    made._step(leading, timers)
    assert firer.calls[:2] == ["fire:1", "fire:0"], "fired first, until nothing is due"
    assert "sweep" in firer.calls and "load" in firer.calls


class Backlog(Nothing):
    """A backlog that fires batch after batch for as long as the loop asks."""

    def __init__(self) -> None:
        self.fires = 0

    def newly_due(self) -> bool:
        return True

    def fire_due(self) -> int:
        self.fires += 1
        return 1 if self.fires < 1_000 else 0


def test_a_pass_stops_firing_once_this_dispatcher_no_longer_leads() -> None:
    claims = Claims()
    firer = Backlog()
    made = dispatcher()
    made.progress = cast(Any, type("Beats", (), {"beat": lambda self, _name: None})())
    leading = leading_with(claims, QuietSender(claims), firer)
    leading.leading_still = lambda: firer.fires < 3  # the lease steps down mid-backlog
    leading.upkeep = cast(Any, firer)
    made._step(leading, _Timers(next_sweep=0.0, next_load=0.0))
    assert firer.fires == 3, "the pass went on firing for a lead it no longer held"


class Thread:
    """A lead's thread: ``join`` says whether it stopped within the time it was given."""

    def __init__(self, stops: bool) -> None:
        self.stops = stops
        self.given: list[float] = []

    def join(self, timeout: float = 30.0) -> bool:
        self.given.append(timeout)
        return self.stops


class Closing:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_lead_winds_down_within_a_lease_life_even_when_a_thread_does_not_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    made = dispatcher()
    made.settings = DispatcherSettings(lease_ttl_ms=3_000)
    leading = leading_with(Claims(), Closing(), Nothing())
    claims, retention = Thread(stops=False), Thread(stops=True)
    leading.claims, leading.retention = cast(Any, claims), cast(Any, retention)
    made._wind_down(leading)
    assert claims.given[0] <= 3.0 and retention.given[0] <= 3.0
    assert cast(Closing, leading.sender).closed, "queued claims are rolled back all the same"
    assert "the claim thread of the last lead has not stopped" in caplog.text
