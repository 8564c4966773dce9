"""Consume a queue, run each message in a thread pool, publish what it yields, then ack.

pika connections are not thread-safe: pool threads hand their outcome back to the
connection thread with ``add_callback_threadsafe``. Outcomes that finish close
together are flushed as one batch: one transaction for their output messages, then
one ack per delivery. A delivery is acked only after its output is committed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from common.broker import BatchPublisher, OutgoingMessage

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _InFlight:
    started: float
    acked_early: bool = False


@dataclass
class ConsumerStats:
    """Counts the owning service reports in its heartbeat or metrics.

    ``durations`` holds (finished at, seconds taken) of the latest runs, monotonic time.
    """

    finished: int = 0
    failed_runs: int = 0
    durations: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=10_000))


class PooledConsumer(Generic[T]):
    """Runs ``run(body)`` per message in a pool and ``flush(outcomes)`` to publish results.

    ``ack_deadline`` (seconds), when set, acks a delivery whose run is still going after
    that long: RabbitMQ closes a channel that keeps a delivery unacked past its
    consumer_timeout (30 minutes by default), which would cut a long job off.
    """

    def __init__(
        self,
        connection: BlockingConnection,
        queue: str,
        pool_size: int,
        run: Callable[[bytes], T],
        flush: Callable[[Sequence[T]], Sequence[OutgoingMessage]],
        ack_deadline: float | None = None,
    ) -> None:
        self._connection = connection
        self._queue = queue
        self._run = run
        self._flush_fn = flush
        self._ack_deadline = ack_deadline
        self._pool = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="run")
        self._channel: BlockingChannel = connection.channel()
        self._channel.basic_qos(prefetch_count=pool_size)
        self._publisher = BatchPublisher(connection.channel())
        self._in_flight: dict[int, _InFlight] = {}
        self._done: list[tuple[int, T]] = []
        self._flush_scheduled = False
        self._consumer_tag: str | None = None
        self.stats = ConsumerStats()

    @property
    def active(self) -> int:
        """How many deliveries are running now."""
        return len(self._in_flight)

    def start(self) -> None:
        """Begin consuming; messages are handled while the connection processes events."""
        self._consumer_tag = self._channel.basic_consume(self._queue, self._on_message)
        if self._ack_deadline is not None:
            self._connection.call_later(self._sweep_interval(), self._ack_overdue)

    def stop_consuming(self) -> None:
        """Take no new messages; running ones finish and are flushed."""
        if self._consumer_tag is not None:
            self._channel.basic_cancel(self._consumer_tag)
            self._consumer_tag = None

    def close(self) -> None:
        """Release the pool; call after the connection stopped processing."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _on_message(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        tag = int(method.delivery_tag)
        self._in_flight[tag] = _InFlight(started=time.monotonic())
        future = self._pool.submit(self._run, body)
        future.add_done_callback(lambda f: self._hand_back(tag, f))

    def _hand_back(self, tag: int, future: Future[T]) -> None:
        self._connection.add_callback_threadsafe(lambda: self._collect(tag, future))

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
        for tag, _ in batch:
            entry = self._in_flight.pop(tag, None)
            if entry is not None:
                self.stats.durations.append((now, now - entry.started))
                if not entry.acked_early:
                    self._channel.basic_ack(tag)
        self.stats.finished += len(batch)

    def _sweep_interval(self) -> float:
        assert self._ack_deadline is not None
        return max(0.2, min(60.0, self._ack_deadline / 4))

    def _ack_overdue(self) -> None:
        assert self._ack_deadline is not None
        now = time.monotonic()
        for tag, entry in self._in_flight.items():
            if not entry.acked_early and now - entry.started >= self._ack_deadline:
                entry.acked_early = True
                self._channel.basic_ack(tag)
                log.info("acked a long-running delivery early (tag %d)", tag)
        self._connection.call_later(self._sweep_interval(), self._ack_overdue)
