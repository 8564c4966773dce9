"""The claim thread's pacing: back to back while batches come full, else on a wake-up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any, cast

import pytest
from sqlalchemy.exc import OperationalError

from services.dispatcher.trigger import claim_thread
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_thread import ClaimLoop
from services.dispatcher.trigger.wake_thread import WakeListener


class StubClaimer:
    """Finds the given numbers of due jobs in turn, then none."""

    def __init__(self, found: list[int]) -> None:
        self.found = found
        self.calls: list[frozenset[str]] = []

    def claim(self, handlers: Iterable[str], keep_going: Any = None) -> int:
        self.calls.append(frozenset(handlers))
        return self.found.pop(0) if self.found else 0


def loop_with(
    found: list[int], scan_s: float = 60.0
) -> tuple[ClaimLoop, StubClaimer, WakeListener]:
    claimer = StubClaimer(found)
    wake = WakeListener(cast(Any, None), "unused", threading.Event())
    loop = ClaimLoop(cast(TriggerClaimer, claimer), wake, batch_size=10, scan_interval_s=scan_s)
    loop.handlers = frozenset({"demo.noop"})
    return loop, claimer, wake


def wait_until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert condition()


def test_full_batches_are_claimed_back_to_back_then_it_waits() -> None:
    loop, claimer, wake = loop_with([10, 10, 3])
    # The claims made by the time the loop first waits for a wake-up or the timer.
    claims_at_wait: list[int] = []
    wait = wake.wait

    def watched_wait(seconds: float) -> bool:
        claims_at_wait.append(len(claimer.calls))
        return wait(seconds)

    wake.wait = watched_wait  # type: ignore[method-assign]
    running = threading.Event()
    running.set()
    loop.start(running.is_set)
    wait_until(lambda: claims_at_wait)
    assert claims_at_wait[0] == 3  # two full batches back to back, then a short one
    assert loop.claimed.is_set()
    assert claimer.calls[0] == frozenset({"demo.noop"})
    running.clear()
    loop.join()


def test_a_wake_up_claims_again_at_once() -> None:
    loop, claimer, wake = loop_with([0, 4])
    running = threading.Event()
    running.set()
    loop.start(running.is_set)
    wait_until(lambda: len(claimer.calls) == 1)
    assert not loop.claimed.is_set()
    wake.event.set()
    wait_until(lambda: len(claimer.calls) == 2)
    wait_until(loop.claimed.is_set)
    running.clear()
    loop.join()


def test_a_failed_claim_is_tried_again() -> None:
    loop, claimer, _ = loop_with([])
    failures = [RuntimeError("MySQL went away")]

    def flaky(handlers: Iterable[str], keep_going: Any = None) -> int:
        if failures:
            raise failures.pop()
        return StubClaimer.claim(claimer, handlers)

    claimer.claim = flaky  # type: ignore[method-assign]
    running = threading.Event()
    running.set()
    loop.start(running.is_set)
    wait_until(lambda: len(claimer.calls) == 1, seconds=5.0)
    running.clear()
    loop.join()


class FailingClaimer(StubClaimer):
    """Fails ``failures`` times in a row (MySQL gone), then finds what it is given."""

    def __init__(self, failures: int, found: list[int]) -> None:
        super().__init__(found)
        self.failures = failures

    def claim(self, handlers: Iterable[str], keep_going: Any = None) -> int:
        if self.failures:
            self.failures -= 1
            self.calls.append(frozenset(handlers))
            raise OperationalError("SELECT", {}, Exception(2013, "Lost connection"))
        return super().claim(handlers, keep_going)


def test_failed_claims_back_off_with_jitter_counted_from_the_last_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def backoff(failures: int) -> float:
        asked.append(failures)
        return 0.01

    monkeypatch.setattr(claim_thread, "backoff_seconds", backoff)
    claimer = FailingClaimer(3, [10, 3])
    wake = WakeListener(cast(Any, None), "unused", threading.Event())
    loop = ClaimLoop(cast(TriggerClaimer, claimer), wake, batch_size=10, scan_interval_s=60)
    running = threading.Event()
    running.set()
    loop.start(running.is_set)
    wait_until(lambda: len(claimer.calls) == 5)
    claimer.failures = 1
    wake.event.set()
    wait_until(lambda: len(asked) == 4)
    running.clear()
    loop.join()
    assert asked == [1, 2, 3, 1]
