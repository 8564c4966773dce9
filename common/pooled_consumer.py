"""Consume a queue, run each unit of work in a thread pool, publish what it yields, then ack.

pika connections are not thread-safe: pool threads hand their outcome back to the
connection thread with ``add_callback_threadsafe``. Outcomes that finish close
together are flushed as one batch: one transaction for their output messages, then
the acks. A delivery is acked only after the output of every unit it carries is
committed.
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
from itertools import count
from typing import Any, Generic, Protocol, TypeVar

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import AMQPError

from common.broker import BatchPublisher, OutgoingMessage
from common.runtime import backoff_seconds

log = logging.getLogger(__name__)

U = TypeVar("U")
P = TypeVar("P")
T = TypeVar("T")


def unchanged(bodies: Sequence[bytes]) -> Sequence[bytes]:
    """The ``prepare`` step of a consumer whose ``run`` takes the raw bodies."""
    return bodies


def plan_acks(done: Iterable[int], waiting: Iterable[int]) -> tuple[int | None, list[int]]:
    """How to ack the ``done`` delivery tags while the ``waiting`` ones stay unacked.

    One ``multiple`` ack covers every done tag below the lowest waiting one (each ack
    is a frame and a flush in pika, a large share of a worker's CPU one per message); the
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
class _Delivery:
    """One unacked delivery: how many of its units wait, run or await their flush."""

    arrived: float
    waiting: int
    open: int = 0
    started: float | None = None
    acked_early: bool = False

    @property
    def complete(self) -> bool:
        """Every unit it carries ran and was flushed (or was given back)."""
        return self.waiting == 0 and self.open == 0


@dataclass(frozen=True)
class _Run(Generic[U]):
    """One unit handed to the pool: which delivery it came in and when it started."""

    number: int
    tag: int
    unit: U
    started: float


class Packing(Protocol[U]):
    """How a message body carries its units of work, and how units travel again."""

    def unpack(self, body: bytes) -> Sequence[U]:
        """The units a body carries; raises if the body cannot be read."""

    def repack(self, units: Sequence[U]) -> bytes:
        """One body carrying ``units`` (the unstarted rest of a delivery)."""


class OnePerMessage:
    """The packing of a queue whose every message is one unit: its raw body."""

    def unpack(self, body: bytes) -> Sequence[bytes]:
        """The body itself."""
        return (body,)

    def repack(self, units: Sequence[bytes]) -> bytes:
        """Never needed: a one-unit delivery has no rest to send again."""
        (body,) = units
        return body


ONE_PER_MESSAGE = OnePerMessage()


@dataclass
class ConsumerStats:
    """Counts the owning service reports in its heartbeat or metrics.

    ``durations`` holds (finished at, seconds taken) of the latest runs, monotonic time.
    """

    finished: int = 0
    failed_runs: int = 0
    durations: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=10_000))


class PooledConsumer(Generic[U, P, T]):
    """Runs ``run(item)`` per unit of work in a pool and ``flush(outcomes)`` to publish results.

    A message carries one unit or several (``packing``): a pack of executions bound for
    one worker costs the broker and this process one delivery and one ack instead of
    one each. ``prepare(units)`` runs in the connection thread, once for all the units
    started together, and turns each into the item its run gets: work that batches
    well (one Redis call instead of a round trip per unit) goes there. A delivery is
    acked once every unit it carries ran and its outcome was published.

    ``prefetch`` deliveries (default: the pool size) are held at once, and a unit starts
    only when a pool slot is free: the units beyond the pool wait here, unstarted, so
    the next run starts as soon as one ends instead of a broker round trip later.
    Units still waiting when consuming stops are given back (``_give_back``).

    ``ack_deadline`` (seconds), when set, acks a delivery still held that long after it
    arrived (its runs still going): RabbitMQ closes a channel that keeps a delivery
    unacked past its consumer_timeout (30 minutes by default), which would cut a long
    job off. Its units still waiting for a slot by then are given back first.

    A unit whose run raised outside its own error handling is sent back alone as a
    message of its own; the delivery it came in is acked as usual.

    ``occupied()``, when given, counts slots held outside the pool (a worker's timed-out
    runs whose thread goes on): fewer units start while it is above zero, and ``wake``
    looks for free slots again once it drops.

    ``redelivered(units)``, when given, is told the units of each delivery the broker
    marks as delivered before, ahead of their ``prepare``.

    ``hold_unrouted`` keeps a delivery unacked while output of its units comes back
    unroutable (a missing exchange binding would lose it silently), publishing that
    output again after a jittered backoff until a queue takes it; ``reroute``, when
    given, is handed that output first and returns what to publish again (after
    declaring the missing queues, say).

    ``orphaned(outcome)``, when given, gets each outcome that can no longer be flushed:
    its run ended after the connection closed, or it waited for a flush at ``close``.
    """

    def __init__(
        self,
        connection: BlockingConnection,
        queue: str,
        pool_size: int,
        packing: Packing[U],
        prepare: Callable[[Sequence[U]], Sequence[P]],
        run: Callable[[P], T],
        flush: Callable[[Sequence[T]], Sequence[OutgoingMessage]],
        ack_deadline: float | None = None,
        stats: ConsumerStats | None = None,
        prefetch: int | None = None,
        release: Callable[[Sequence[P]], object] | None = None,
        occupied: Callable[[], int] | None = None,
        redelivered: Callable[[Sequence[U]], object] | None = None,
        hold_unrouted: bool = False,
        orphaned: Callable[[T], object] | None = None,
        reroute: Callable[[Sequence[OutgoingMessage]], Sequence[OutgoingMessage]] | None = None,
    ) -> None:
        self._connection = connection
        self._queue = queue
        self._packing = packing
        self._prepare = prepare
        self._run = run
        self._flush_fn = flush
        self._release = release
        self._occupied = occupied
        self._note_redelivered = redelivered
        self._hold_unrouted = hold_unrouted
        self._reroute = reroute
        self._orphaned = orphaned
        self._submitted: dict[int, tuple[Future[T], P]] = {}
        self._stopping = False
        self._runs = count()
        self._ack_deadline = ack_deadline
        self._pool_size = pool_size
        self._pool = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="run")
        self._running = 0
        self._channel: BlockingChannel = connection.channel()
        self._channel.basic_qos(prefetch_count=max(pool_size, prefetch or pool_size))
        self._publisher = BatchPublisher(connection.channel())
        self._in_flight: dict[int, _Delivery] = {}
        self._done: list[tuple[int, float, T]] = []
        self._flush_scheduled = False
        self._arrived: deque[tuple[int, U]] = deque()
        self._admit_scheduled = False
        self._prepare_failures = 0
        self._prepare_retry = False
        self._finished: list[tuple[_Run[U], Future[T]]] = []
        self._finished_lock = threading.Lock()
        self._drain_scheduled = False
        self._consumer_tag: str | None = None
        self.stats = stats if stats is not None else ConsumerStats()

    @property
    def held(self) -> int:
        """Deliveries taken from the queue and not yet settled (safe from any thread)."""
        return len(self._in_flight)

    @property
    def active(self) -> int:
        """How many units are running now or finished and not yet flushed."""
        return self._running + len(self._done)

    @property
    def waiting(self) -> int:
        """How many units arrived and wait for a free slot."""
        return len(self._arrived)

    def wake(self) -> None:
        """Start waiting units in slots freed outside the pool; safe from any thread."""
        try:
            self._connection.add_callback_threadsafe(self._admit)
        except AMQPError:
            pass  # the connection is gone; its deliveries go back to the queue

    def start(self) -> None:
        """Begin consuming; messages are handled while the connection processes events."""
        self._consumer_tag = self._channel.basic_consume(self._queue, self._on_message)
        if self._ack_deadline is not None:
            self._connection.call_later(self._sweep_interval(), self._ack_overdue)

    def stop_consuming(self) -> None:
        """Take no new messages; running units finish and are flushed, waiting ones go back."""
        self._stopping = True
        if self._consumer_tag is not None:
            self._channel.basic_cancel(self._consumer_tag)
            self._consumer_tag = None
        self._give_back({tag for tag, _ in self._arrived})

    def resume_consuming(self) -> None:
        """Take messages again after ``stop_consuming`` (an operator's drain lifted)."""
        self._stopping = False
        if self._consumer_tag is None:
            self._consumer_tag = self._channel.basic_consume(self._queue, self._on_message)
        self._admit()

    def close(self) -> None:
        """Release the pool; call after the connection stopped processing.

        Runs admitted but not yet picked up by a pool thread are cancelled: their
        deliveries go back to the queue with the connection, and ``release`` is given
        their items, so whatever admitting them claimed (the worker's started key) does
        not make the redelivered copy look like an interrupted run. Outcomes still
        waiting for a flush go to ``orphaned``.
        """
        self._pool.shutdown(wait=False, cancel_futures=True)
        done, self._done = self._done, []
        if self._orphaned is not None:
            for _tag, _started, outcome in done:
                self._orphaned(outcome)
        never_ran = [item for future, item in self._submitted.values() if future.cancelled()]
        self._submitted.clear()
        if never_ran and self._release is not None:
            try:
                self._release(never_ran)
            except Exception:
                log.exception("could not release %d runs that never started", len(never_ran))

    def _on_message(self, _ch: Any, method: Any, props: Any, body: bytes) -> None:
        tag = int(method.delivery_tag)
        try:
            units = self._packing.unpack(body)
        except Exception:
            # It cannot be read now or ever: back on the queue it would loop for good.
            log.exception("dropping message %s: its body cannot be read", props.message_id)
            self._channel.basic_reject(tag, requeue=False)
            return
        if not units:
            self._channel.basic_ack(tag)
            return
        if method.redelivered and self._note_redelivered is not None:
            self._note_redelivered(units)
        self._in_flight[tag] = _Delivery(arrived=time.monotonic(), waiting=len(units))
        self._arrived.extend((tag, unit) for unit in units)
        if not self._admit_scheduled:
            self._admit_scheduled = True
            self._connection.add_callback_threadsafe(self._admit)

    def _admit(self) -> None:
        """Start as many waiting units as there are free pool slots."""
        self._admit_scheduled = False
        free = self._pool_size - self._running
        if self._occupied is not None:
            free -= self._occupied()
        if free <= 0 or not self._arrived or self._stopping or self._prepare_retry:
            return
        batch = [self._arrived.popleft() for _ in range(min(free, len(self._arrived)))]
        try:
            items = self._prepare([unit for _, unit in batch])
        except Exception as e:
            self._prepare_failed(batch, e)
            return
        self._prepare_failures = 0
        now = time.monotonic()
        self._running += len(batch)
        for (tag, unit), item in zip(batch, items, strict=True):
            delivery = self._in_flight[tag]
            delivery.waiting -= 1
            delivery.open += 1
            if delivery.started is None:
                delivery.started = now
            run = _Run(next(self._runs), tag, unit, now)
            future = self._pool.submit(self._run, item)
            self._submitted[run.number] = (future, item)
            future.add_done_callback(partial(self._hand_back, run))

    def _prepare_failed(self, batch: list[tuple[int, U]], error: Exception) -> None:
        """Keep the units waiting and try again after a jittered backoff.

        Given back to the queue, they would come straight back while the store that
        ``prepare`` needs (Redis) is down: a tight loop of nacks and redeliveries.
        Held here, they stay this consumer's; the ack deadline and stopping still give
        them back as usual.
        """
        self._arrived.extendleft(reversed(batch))
        self._prepare_failures += 1
        delay = backoff_seconds(self._prepare_failures)
        log.warning(
            "preparing %d units failed (%r); trying again in %.1f s", len(batch), error, delay
        )
        self._prepare_retry = True
        self._connection.call_later(delay, self._retry_prepare)

    def _retry_prepare(self) -> None:
        self._prepare_retry = False
        self._admit()

    def _hand_back(self, run: _Run[U], future: Future[T]) -> None:
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
        """Hand outcomes this consumer can no longer flush to ``orphaned``."""
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
        for run, future in finished:
            self._submitted.pop(run.number, None)
            self._collect(run, future)
        self._admit()

    def _collect(self, run: _Run[U], future: Future[T]) -> None:
        try:
            outcome = future.result()
        except Exception:
            log.exception("run failed outside its own error handling; sending it back")
            self._publisher.publish([self._rest(run.tag, [run.unit])])
            delivery = self._in_flight[run.tag]
            delivery.open -= 1
            if delivery.complete and self._settle(run.tag):
                self._channel.basic_ack(run.tag)
            return
        self._done.append((run.tag, run.started, outcome))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._connection.add_callback_threadsafe(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._done = self._done, []
        if not batch:
            return
        messages = self._flush_fn([outcome for _, _, outcome in batch])
        self._publish_then_settle(batch, messages, 0)

    def _publish_then_settle(
        self, batch: list[tuple[int, float, T]], messages: Sequence[OutgoingMessage], tries: int
    ) -> None:
        """Publish a batch's output, then ack its deliveries; with ``hold_unrouted``,
        output the broker returned (no queue took it) is published again after a
        jittered backoff, and its deliveries stay unacked until it lands."""
        returned = self._publisher.publish(messages)
        if returned and self._hold_unrouted:
            unrouted = [m for m in messages if m.message_id in returned]
            if self._reroute is not None:
                unrouted = list(self._reroute(unrouted))
            delay = backoff_seconds(tries + 1)
            log.error(
                "the broker routed %d output messages to no queue (is %s bound?); holding "
                "their deliveries and publishing again in %.1f s",
                len(unrouted),
                unrouted[0].exchange,
                delay,
            )
            self._connection.call_later(
                delay, partial(self._publish_then_settle, batch, unrouted, tries + 1)
            )
            return
        self._settle_flushed(batch)

    def _settle_flushed(self, batch: list[tuple[int, float, T]]) -> None:
        """Ack the deliveries a published batch completes."""
        now = time.monotonic()
        done: list[int] = []
        for tag, started, _ in batch:
            self.stats.durations.append((now, now - started))
            delivery = self._in_flight[tag]
            delivery.open -= 1
            if delivery.complete and self._settle(tag):
                done.append(tag)
        waiting = [tag for tag, delivery in self._in_flight.items() if not delivery.acked_early]
        up_to, singles = plan_acks(done, waiting)
        if up_to is not None:
            self._channel.basic_ack(up_to, multiple=True)
        for tag in singles:
            self._channel.basic_ack(tag)
        self.stats.finished += len(batch)

    def _settle(self, tag: int) -> bool:
        """Forget a complete delivery; True when the caller is to ack it now."""
        return not self._in_flight.pop(tag).acked_early

    def _rest(self, tag: int, units: Sequence[U]) -> OutgoingMessage:
        """A message of its own, to this queue, for units of delivery ``tag``."""
        return OutgoingMessage("", self._queue, self._packing.repack(units), f"rest-of-{tag}")

    def _give_back(self, tags: set[int]) -> None:
        """Return the waiting units of these deliveries to the queue.

        A delivery none of whose units started goes back whole. The waiting rest of one
        partly started is published as a message of its own (committed before that
        delivery's ack), and the delivery is acked once its started units are flushed.
        The bookkeeping is settled before the publish: pika may run queued callbacks
        (finished runs, flushes) while it waits for the broker's commit.
        """
        if not tags:
            return
        rests: dict[int, list[U]] = {}
        kept: deque[tuple[int, U]] = deque()
        for tag, unit in self._arrived:
            if tag in tags:
                rests.setdefault(tag, []).append(unit)
            else:
                kept.append((tag, unit))
        self._arrived = kept
        messages: list[OutgoingMessage] = []
        for tag, units in rests.items():
            delivery = self._in_flight[tag]
            delivery.waiting = 0
            if delivery.started is None:
                del self._in_flight[tag]
                self._channel.basic_nack(tag, requeue=True)
            else:
                messages.append(self._rest(tag, units))
        if not messages:
            return
        self._publisher.publish(messages)
        for tag in rests:
            held = self._in_flight.get(tag)
            if held is not None and held.complete and self._settle(tag):
                self._channel.basic_ack(tag)

    def _sweep_interval(self) -> float:
        assert self._ack_deadline is not None
        return max(0.2, min(60.0, self._ack_deadline / 4))

    def _ack_overdue(self) -> None:
        assert self._ack_deadline is not None
        now = time.monotonic()
        overdue = [
            tag
            for tag, delivery in self._in_flight.items()
            if not delivery.acked_early and now - delivery.arrived >= self._ack_deadline
        ]
        # Units still waiting for a slot go back before the broker's consumer timeout
        # closes the channel; the runs still going are acked early.
        waiting = {tag for tag in overdue if self._in_flight[tag].waiting}
        self._give_back(waiting)
        early = [tag for tag in overdue if tag in self._in_flight]
        for tag in early:
            self._in_flight[tag].acked_early = True
            self._channel.basic_ack(tag)
        if waiting:
            log.info("gave the waiting units of %d deliveries back to the queue", len(waiting))
        if early:
            log.info("acked %d long-running deliveries early", len(early))
        self._connection.call_later(self._sweep_interval(), self._ack_overdue)
