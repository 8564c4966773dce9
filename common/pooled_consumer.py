"""Consume a queue, run each message in a thread pool, publish what it yields, then ack.

pika connections are not thread-safe: pool threads hand their outcome back to the
connection thread with ``add_callback_threadsafe``. Outcomes that finish close
together are flushed as one batch: one transaction for their output messages, then
one ack per delivery. A delivery is acked only after its output is committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import AMQPError

from common.broker import BatchPublisher, OutgoingMessage

log = logging.getLogger(__name__)

P = TypeVar("P")
T = TypeVar("T")


def unchanged(bodies: Sequence[bytes]) -> Sequence[bytes]:
    """The ``prepare`` step of a consumer whose ``run`` takes the raw bodies."""
    return bodies


def plan_acks(done: Iterable[int], waiting: Iterable[int]) -> tuple[int | None, list[int]]:
    """How to ack the ``done`` delivery tags while the ``waiting`` ones stay unacked.

    One ``multiple`` ack covers every done tag below the lowest waiting one (each ack
    is a frame and a flush in pika: per-message acks were 15% of a worker's CPU); the
    done tags above it are acked one by one, so a long run never holds them back.
    Returns the tag for the multiple ack (None when there is none) and the singles.
    """
    ordered = sorted(done)
    floor = min(waiting, default=None)
    below = [tag for tag in ordered if floor is None or tag < floor]
    above = ordered[len(below) :]
    if len(below) < 2:
        return None, ordered
    return below[-1], above


@dataclass
class _InFlight:
    arrived: float
    started: float | None = None
    acked_early: bool = False


@dataclass
class ConsumerStats:
    """Counts the owning service reports in its heartbeat or metrics.

    ``durations`` holds (finished at, seconds taken) of the latest runs, monotonic time.
    """

    finished: int = 0
    failed_runs: int = 0
    durations: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=10_000))


class PooledConsumer(Generic[P, T]):
    """Runs ``run(item)`` per message in a pool and ``flush(outcomes)`` to publish results.

    ``prepare(bodies)`` runs first in the connection thread, once for all the messages
    that arrived together, and turns each body into the item its run gets: work that
    batches well (one Redis pipeline instead of a round trip per message) goes there.

    ``prefetch`` deliveries (default: the pool size) are held at once, and a run starts
    only when a pool slot is free: the deliveries beyond the pool wait here, unstarted,
    so the next run starts as soon as one ends instead of a broker round trip later
    (bench/pipeline.py with no-op jobs: ~26% more jobs/s with a window four times the
    pool). Waiting deliveries are given back to the queue when consuming stops.

    ``ack_deadline`` (seconds), when set, acks a delivery whose run is still going after
    that long: RabbitMQ closes a channel that keeps a delivery unacked past its
    consumer_timeout (30 minutes by default), which would cut a long job off. A delivery
    still waiting for a slot after that long is given back to the queue instead.
    """

    def __init__(
        self,
        connection: BlockingConnection,
        queue: str,
        pool_size: int,
        prepare: Callable[[Sequence[bytes]], Sequence[P]],
        run: Callable[[P], T],
        flush: Callable[[Sequence[T]], Sequence[OutgoingMessage]],
        ack_deadline: float | None = None,
        stats: ConsumerStats | None = None,
        prefetch: int | None = None,
        release: Callable[[Sequence[P]], object] | None = None,
    ) -> None:
        self._connection = connection
        self._queue = queue
        self._prepare = prepare
        self._run = run
        self._flush_fn = flush
        self._release = release
        self._submitted: dict[int, tuple[Future[T], P]] = {}
        self._ack_deadline = ack_deadline
        self._pool_size = pool_size
        self._pool = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="run")
        self._running = 0
        self._channel: BlockingChannel = connection.channel()
        self._channel.basic_qos(prefetch_count=max(pool_size, prefetch or pool_size))
        self._publisher = BatchPublisher(connection.channel())
        self._in_flight: dict[int, _InFlight] = {}
        self._done: list[tuple[int, T]] = []
        self._flush_scheduled = False
        self._arrived: deque[tuple[int, bytes]] = deque()
        self._admit_scheduled = False
        self._finished: list[tuple[int, Future[T]]] = []
        self._finished_lock = threading.Lock()
        self._drain_scheduled = False
        self._consumer_tag: str | None = None
        self.stats = stats if stats is not None else ConsumerStats()

    @property
    def active(self) -> int:
        """How many deliveries are running now or finished and not yet acked."""
        return len(self._in_flight) - len(self._arrived)

    def start(self) -> None:
        """Begin consuming; messages are handled while the connection processes events."""
        self._consumer_tag = self._channel.basic_consume(self._queue, self._on_message)
        if self._ack_deadline is not None:
            self._connection.call_later(self._sweep_interval(), self._ack_overdue)

    def stop_consuming(self) -> None:
        """Take no new messages; running ones finish and are flushed, waiting ones go back."""
        if self._consumer_tag is not None:
            self._channel.basic_cancel(self._consumer_tag)
            self._consumer_tag = None
        while self._arrived:
            tag, _ = self._arrived.popleft()
            self._in_flight.pop(tag, None)
            self._channel.basic_nack(tag, requeue=True)

    def close(self) -> None:
        """Release the pool; call after the connection stopped processing.

        Runs admitted but not yet picked up by a pool thread are cancelled: their
        deliveries go back to the queue with the connection, and ``release`` is given
        their items, so whatever admitting them claimed (the worker's started key) does
        not make the redelivered copy look like an interrupted run.
        """
        self._pool.shutdown(wait=False, cancel_futures=True)
        never_ran = [item for future, item in self._submitted.values() if future.cancelled()]
        self._submitted.clear()
        if never_ran and self._release is not None:
            try:
                self._release(never_ran)
            except Exception:
                log.exception("could not release %d runs that never started", len(never_ran))

    def _on_message(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        tag = int(method.delivery_tag)
        self._in_flight[tag] = _InFlight(arrived=time.monotonic())
        self._arrived.append((tag, body))
        if not self._admit_scheduled:
            self._admit_scheduled = True
            self._connection.add_callback_threadsafe(self._admit)

    def _admit(self) -> None:
        """Start as many waiting deliveries as there are free pool slots."""
        self._admit_scheduled = False
        free = self._pool_size - self._running
        if free <= 0 or not self._arrived:
            return
        batch = [self._arrived.popleft() for _ in range(min(free, len(self._arrived)))]
        try:
            items = self._prepare([body for _, body in batch])
        except Exception:
            log.exception("preparing %d messages failed; requeueing them", len(batch))
            for tag, _ in batch:
                self._in_flight.pop(tag, None)
                self._channel.basic_nack(tag, requeue=True)
            return
        now = time.monotonic()
        self._running += len(batch)
        for (tag, _), item in zip(batch, items, strict=True):
            self._in_flight[tag].started = now
            future = self._pool.submit(self._run, item)
            self._submitted[tag] = (future, item)
            future.add_done_callback(partial(self._hand_back, tag))

    def _hand_back(self, tag: int, future: Future[T]) -> None:
        # Pool threads queue their outcome and wake the connection thread once, not once
        # per outcome: each wake-up is a write to pika's wake-up socket.
        with self._finished_lock:
            self._finished.append((tag, future))
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            self._connection.add_callback_threadsafe(self._drain_finished)
        except AMQPError:
            # The connection is gone: its deliveries return to the queue and are handled
            # again (a run that had started is then reported LOST).
            log.warning("connection closed; dropping the outcome of delivery %d", tag)

    def _drain_finished(self) -> None:
        with self._finished_lock:
            finished, self._finished = self._finished, []
            self._drain_scheduled = False
        self._running -= len(finished)
        for tag, future in finished:
            self._submitted.pop(tag, None)
            self._collect(tag, future)
        self._admit()

    def _collect(self, tag: int, future: Future[T]) -> None:
        try:
            outcome = future.result()
        except Exception:
            log.exception("run failed outside its own error handling; requeueing")
            self._in_flight.pop(tag, None)
            self._channel.basic_nack(tag, requeue=True)
            return
        self._done.append((tag, outcome))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._connection.add_callback_threadsafe(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._done = self._done, []
        if not batch:
            return
        self._publisher.publish(self._flush_fn([outcome for _, outcome in batch]))
        now = time.monotonic()
        done: list[int] = []
        for tag, _ in batch:
            entry = self._in_flight.pop(tag, None)
            if entry is not None:
                self.stats.durations.append((now, now - (entry.started or entry.arrived)))
                if not entry.acked_early:
                    done.append(tag)
        waiting = [tag for tag, entry in self._in_flight.items() if not entry.acked_early]
        up_to, singles = plan_acks(done, waiting)
        if up_to is not None:
            self._channel.basic_ack(up_to, multiple=True)
        for tag in singles:
            self._channel.basic_ack(tag)
        self.stats.finished += len(batch)

    def _sweep_interval(self) -> float:
        assert self._ack_deadline is not None
        return max(0.2, min(60.0, self._ack_deadline / 4))

    def _ack_overdue(self) -> None:
        assert self._ack_deadline is not None
        now = time.monotonic()
        stale = [
            (t, b)
            for t, b in self._arrived
            if now - self._in_flight[t].arrived >= self._ack_deadline
        ]
        for tag, body in stale:
            # Waiting this long for a slot: back to the queue before the broker's
            # consumer timeout closes the channel.
            self._arrived.remove((tag, body))
            self._in_flight.pop(tag, None)
            self._channel.basic_nack(tag, requeue=True)
        for tag, entry in self._in_flight.items():
            started = entry.started
            if (
                started is not None
                and not entry.acked_early
                and now - started >= self._ack_deadline
            ):
                entry.acked_early = True
                self._channel.basic_ack(tag)
                log.info("acked a long-running delivery early (tag %d)", tag)
        if stale:
            log.info("gave %d deliveries that waited for a slot back to the queue", len(stale))
        self._connection.call_later(self._sweep_interval(), self._ack_overdue)
