"""A thread pool for a consumer's runs, handing each outcome back to the connection thread.

pika connections are not thread-safe: a pool thread queues its finished run and wakes
the connection thread with ``add_callback_threadsafe``, once for all the runs that
finish before it gets there. Runs started elsewhere (tasks on an event loop, through
``start``) are counted and handed back the same way, with no thread of their own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import count
from typing import Generic, TypeVar

from pika.adapters.blocking_connection import BlockingConnection
from pika.exceptions import AMQPError

log = logging.getLogger(__name__)

U = TypeVar("U")
P = TypeVar("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Run(Generic[U]):
    """One unit handed to the pool: which delivery it came in and when it started."""

    number: int
    tag: int
    unit: U
    started: float


Finished = list[tuple[Run[U], Future[T]]]


class RunPool(Generic[U, P, T]):
    """Runs units in a thread pool and hands them back to the connection thread.

    ``run(item)`` runs in one of ``size`` threads, unless ``start`` is given: then
    ``start(item)`` starts each run where it runs and returns its future, and no thread
    is made. ``finished(runs)`` gets the runs that ended since it last ran, in the
    connection thread. ``orphaned(outcome)``, when
    given, gets the outcome of a run that ended after the connection closed, so the
    redelivered copy can find it.
    """

    def __init__(
        self,
        connection: BlockingConnection,
        size: int,
        run: Callable[[P], T] | None,
        finished: Callable[[Finished[U, T]], None],
        orphaned: Callable[[T], object] | None = None,
        start: Callable[[P], Future[T]] | None = None,
    ) -> None:
        self._connection = connection
        self._on_finished = finished
        self._orphaned = orphaned
        if run is None and start is None:
            raise ValueError("a RunPool needs run or start")
        self._run = run
        self._start = start
        # Its threads are made on first use only: none when runs are started elsewhere.
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="run")
        self._numbers = count()
        self._submitted: dict[int, tuple[Future[T], P]] = {}
        # The runs not yet handed back, for ``going`` (read from other threads).
        self._going: dict[int, Run[U]] = {}
        self._running = 0
        self._finished: Finished[U, T] = []
        self._finished_lock = threading.Lock()
        self._drain_scheduled = False

    @property
    def running(self) -> int:
        """Runs submitted and not yet handed back to the connection thread."""
        return self._running

    def going(self) -> list[Run[U]]:
        """The runs started and not yet handed back (safe from any thread)."""
        # dict.copy holds the GIL throughout: no size change can interrupt it.
        return list(self._going.copy().values())

    def submit(self, batch: Sequence[tuple[int, U, P]], started: float) -> None:
        """Start a run of each item, with the delivery tag and unit it came from."""
        self._running += len(batch)
        for tag, unit, item in batch:
            run = Run(next(self._numbers), tag, unit, started)
            future = self._begin(item)
            self._submitted[run.number] = (future, item)
            self._going[run.number] = run
            future.add_done_callback(partial(self._hand_back, run))

    def _begin(self, item: P) -> Future[T]:
        if self._start is not None:
            return self._start(item)
        assert self._run is not None  # one of the two, checked when made
        return self._pool.submit(self._run, item)

    def shutdown(self) -> list[P]:
        """Stop the pool; the items of runs no thread picked up yet are cancelled and
        returned (runs given to ``start`` are its own to end)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        never_ran = [item for future, item in self._submitted.values() if future.cancelled()]
        self._submitted.clear()
        self._going.clear()
        return never_ran

    def _hand_back(self, run: Run[U], future: Future[T]) -> None:
        # Pool threads queue their outcome and wake the connection thread once, not once
        # per outcome: each wake-up is a write to pika's wake-up socket.
        with self._finished_lock:
            self._finished.append((run, future))
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            self._connection.add_callback_threadsafe(self._drain_finished)
        except AMQPError:
            # The connection is gone: its deliveries return to the queue and are handled
            # again; ``orphaned`` keeps the outcome where that copy can find it.
            log.warning("connection closed; cannot flush the outcome of delivery %d", run.tag)
            self._orphan([future])

    def _orphan(self, futures: Sequence[Future[T]]) -> None:
        """Hand outcomes that can no longer be flushed to ``orphaned``."""
        if self._orphaned is None:
            return
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                try:
                    self._orphaned(future.result())
                except Exception:
                    log.exception("could not keep an outcome the connection lost")

    def _drain_finished(self) -> None:
        with self._finished_lock:
            finished, self._finished = self._finished, []
            self._drain_scheduled = False
        self._running -= len(finished)
        for run, _ in finished:
            self._submitted.pop(run.number, None)
            self._going.pop(run.number, None)
        self._on_finished(finished)
