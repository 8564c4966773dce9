"""The fair line of one consumer's callbacks, kept on the poster's event loop.

Each callback the consumer takes goes into the line at once (``start``, from the
consumer's thread), and its future ends when its attempt does. The line itself
(``FairLine``: the app and host shares, its order, its parking) is served on the loop:
when a POST ends, or an attempt's record is written, the next attempts start there and
then, with no hop to the consumer's thread and back. Only arrivals cross threads, many
in one hop.

An attempt's future ends after its record is written, so the consumer still acks a
callback only once its attempt is recorded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import count
from typing import Any

from common.broker import OutgoingMessage
from common.topology import CALLBACKS_QUEUE
from services.notifier.delivery import Attempt
from services.notifier.fair_line import SWEEP_SECONDS, FairLine
from services.notifier.pending import PendingCallback

Outcome = Attempt | None


@dataclass(frozen=True)
class LineHooks:
    """What the line needs of the deliverer: ``hop`` runs a coroutine on the poster's
    loop (from any thread); ``attempt`` is a callback's attempt, counted by the line
    with the scheduler; ``settle`` settles one that goes without an attempt (parked,
    or unreadable) at once."""

    hop: Callable[[Coroutine[Any, Any, None]], object]
    attempt: Callable[[PendingCallback], Coroutine[Any, Any, Outcome]]
    settle: Callable[[PendingCallback], Attempt]


def returned(unit: PendingCallback) -> Attempt:
    """A waiting callback handed back when its consumer stops: its own body, to the
    callbacks queue again (published before its delivery is acked)."""
    message_id = unit.message.delivery_id if unit.message is not None else "returned"
    return Attempt(False, OutgoingMessage("", CALLBACKS_QUEUE, unit.own_body(), message_id))


class LoopLine:
    """Callbacks waiting for their attempts, started on the poster's loop.

    ``start`` is safe from any thread; ``pump`` runs on the loop. The ``FairLine`` is
    touched under a lock, so that its counts can be read from other threads
    (``waiting_by_app``, ``waiting_by_host``: the standing report).
    """

    def __init__(self, line: FairLine, hooks: LineHooks) -> None:
        self._line = line
        self._hooks = hooks
        self._lock = threading.Lock()
        self._arrivals: list[tuple[int, PendingCallback, Future[Outcome]]] = []
        self._hop_due = False
        self._futures: dict[int, Future[Outcome]] = {}
        self._numbers = count(1)
        self._pump_due = False
        self._sweep_due = False
        self._closed = False

    def __len__(self) -> int:
        """Callbacks waiting in the line (not those still crossing to the loop)."""
        with self._lock:
            return len(self._line)

    def waiting_by_app(self) -> dict[int, int]:
        """Callbacks waiting for an attempt, by app."""
        with self._lock:
            return self._line.waiting_by_app()

    def waiting_by_host(self) -> dict[str, int]:
        """Callbacks waiting for an attempt, by host."""
        with self._lock:
            return self._line.waiting_by_host()

    def start(self, unit: PendingCallback) -> Future[Outcome]:
        """The callback waits for its attempt (from any thread); its future ends with
        the attempt. One that goes without an attempt is settled at once."""
        if unit.goes_at_once:
            return _done(self._hooks.settle(unit))
        future: Future[Outcome] = Future()
        with self._lock:
            if self._closed:
                future.set_result(returned(unit))
                return future
            self._arrivals.append((next(self._numbers), unit, future))
            if self._hop_due:
                return future
            self._hop_due = True
        self._hooks.hop(self._arrive())
        return future

    async def _arrive(self) -> None:
        with self._lock:
            arrived, self._arrivals = self._arrivals, []
            self._hop_due = False
            for number, unit, future in arrived:
                self._futures[number] = future
                self._line.add(number, unit)
        self.pump()

    def pump_soon(self) -> None:
        """``pump`` once, soon, for every call made until then (on the loop)."""
        if not self._pump_due:
            self._pump_due = True
            asyncio.get_running_loop().call_soon(self._pump_once)

    def _pump_once(self) -> None:
        self._pump_due = False
        self.pump()

    def pump(self) -> None:
        """Start every callback that may start now (on the loop)."""
        with self._lock:
            taken = [
                (unit, self._futures.pop(number))
                for number, unit in self._line.take(len(self._line))
            ]
            waiting = len(self._line)
        for unit, future in taken:
            if unit.goes_at_once:
                _settle(future, self._hooks.settle, unit)
            else:
                self._begin(unit, future)
        if waiting and not self._sweep_due:
            # The line parks what waited too long only when it is served: serve it
            # now and then while callbacks wait, even when no attempt ends.
            self._sweep_due = True
            asyncio.get_running_loop().call_later(SWEEP_SECONDS, self._sweep)

    def _sweep(self) -> None:
        self._sweep_due = False
        self.pump()

    def _begin(self, unit: PendingCallback, future: Future[Outcome]) -> None:
        task = asyncio.get_running_loop().create_task(self._hooks.attempt(unit))
        task.add_done_callback(lambda ended: self._ended(ended, future))

    def _ended(self, task: asyncio.Task[Outcome], future: Future[Outcome]) -> None:
        """An attempt ended (its record written, or it raised): its job may have a
        later callback waiting."""
        if task.cancelled():
            future.cancel()
        elif task.exception() is not None:
            future.set_exception(task.exception())
        else:
            future.set_result(task.result())
        self.pump_soon()

    def give_back(self) -> None:
        """Hand every waiting callback back to the queue, and those that arrive later
        (the consumer stops; from any thread)."""
        with self._lock:
            self._closed = True
        self._hooks.hop(self._give_back())

    async def _give_back(self) -> None:
        with self._lock:
            arrived, self._arrivals = self._arrivals, []
            waiting = self._line.withdraw(self._line.tags())
            handed = [(u, self._futures.pop(n)) for n, units in waiting.items() for u in units]
        handed += [(unit, future) for _, unit, future in arrived]
        for unit, future in handed:
            future.set_result(returned(unit))

    def drop(self) -> None:
        """Forget the waiting callbacks unstarted: their connection is gone, and its
        deliveries went back to the queue with it (from any thread)."""
        with self._lock:
            self._closed = True
            self._arrivals.clear()
            self._line.withdraw(self._line.tags())
            self._futures.clear()


def _done(outcome: Outcome) -> Future[Outcome]:
    future: Future[Outcome] = Future()
    future.set_result(outcome)
    return future


def _settle(
    future: Future[Outcome], settle: Callable[[PendingCallback], Attempt], unit: PendingCallback
) -> None:
    try:
        future.set_result(settle(unit))
    except Exception as e:
        future.set_exception(e)
