"""One pass of the dispatch loop against a claim handed over mid-pass."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from common.config import DispatcherSettings
from services.dispatcher.main import Dispatcher, _Leading, _Timers


class Nothing:
    """Stands in for every part of the loop that has no work in this test."""

    def sweep(self) -> None: ...
    def live(self) -> list[Any]:
        return []

    def load(self) -> int:
        return 0

    def fire_due(self) -> int:
        return 0

    def warm_up(self) -> None: ...
    def next_wake(self) -> None:
        return None

    def process_data_events(self, _timeout: float) -> None: ...


class Claims:
    def __init__(self) -> None:
        self.claimed = threading.Event()
        self.handlers: frozenset[str] = frozenset()


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
            self._claims.claimed.set()
        return 0


def test_a_claim_handed_over_during_a_pass_ends_the_next_sleep_at_once() -> None:
    dispatcher = Dispatcher.__new__(Dispatcher)
    dispatcher.settings = DispatcherSettings()
    claims = Claims()
    sender = LateSender(claims)
    nothing = Nothing()
    leading = _Leading(
        connection=cast(Any, nothing),
        directory=cast(Any, nothing),
        claims=cast(Any, claims),
        sender=cast(Any, sender),
        publisher=cast(Any, None),
        firer=cast(Any, nothing),
        recovery=cast(Any, nothing),
    )
    timers = _Timers(next_sweep=time.monotonic() + 60)
    claims.claimed.set()  # the claim before
    wait = dispatcher._step(leading, timers)
    assert sender.queued == 1
    # The loop sleeps on ``claimed``: it must still be set, or the claim waits a scan.
    assert claims.claimed.wait(max(0.0, min(wait, 0.05)))
    dispatcher._step(leading, timers)
    assert sender.sent == 1
