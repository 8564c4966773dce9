"""Consume a queue, run each unit of work in a thread pool, publish what it yields, then ack.

The parts, each in a module of its own: ``Packing`` reads a body's units,
``HeldDeliveries`` keeps account of the deliveries held and their units waiting for a
slot, ``RunPool`` runs units and hands their outcomes back to the connection thread
(pika connections are not thread-safe), and ``OutcomeFlush`` publishes the output of
outcomes that finish close together in one transaction, then acks. A delivery is acked
only after the output of every unit it carries is committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from statistics import median_low
from typing import Any, Generic, TypeVar

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import AMQPError

from common.broker import BatchPublisher, OutgoingMessage
from common.consumer.held_deliveries import HeldDeliveries
from common.consumer.outcome_flush import OutcomeFlush
from common.consumer.run_pool import Finished, Run, RunPool
from common.consumer.stats import ConsumerStats
from common.consumer.work import ConsumerSettings, ConsumerWork
from common.runtime import backoff_seconds
from common.store_errors import is_lock_conflict

log = logging.getLogger(__name__)

# The header of a unit sent back after its run raised: its copy is a redelivery.
RAN_BEFORE = "x-kairos-ran-before"

U = TypeVar("U")
P = TypeVar("P")
T = TypeVar("T")


class PooledConsumer(Generic[U, P, T]):
    """Runs each unit of work in a pool and publishes what the runs yield, then acks.

    A message carries one unit or several (``work.packing``): a pack of executions bound
    for one worker costs the broker and this process one delivery and one ack instead
    of one each. ``work.prepare`` runs in the connection thread, once for all the units
    started together: work that batches well (one Redis call instead of a round trip
    per unit) goes there. A delivery is acked once every unit it carries ran and its
    outcome was published.

    A unit starts only when a pool slot is free: the units beyond the pool wait here,
    unstarted, in ``work.line`` (which also says which start first), so the next run
    starts as soon as one ends instead of a broker round trip later. Units still
    waiting when consuming stops are given back (``_give_back``); so are those of a
    delivery held past ``settings.ack_deadline``, before it is acked.

    A unit whose run raised outside its own error handling is sent back alone as a
    message of its own; the delivery it came in is acked as usual.
    """

    def __init__(
        self,
        connection: BlockingConnection,
        settings: ConsumerSettings,
        work: ConsumerWork[U, P, T],
        stats: ConsumerStats | None = None,
    ) -> None:
        pool_size = settings.pool_size
        self._connection = connection
        self._queue = settings.queue
        self._packing = work.packing
        self._prepare = work.prepare
        self._release = work.release
        self._occupied = work.occupied
        self._note_redelivered = work.redelivered
        self._orphaned = work.orphaned
        self._kind = work.kind
        self._stopping = False
        self._ack_deadline = settings.ack_deadline
        self._pool_size = pool_size
        self._runs: RunPool[U, P, T] = RunPool(
            connection, pool_size, work.run, self._drain_finished, work.orphaned, work.start
        )
        self._channel: BlockingChannel = connection.channel()
        # Each queue's prefetch, set before its consumer starts: RabbitMQ applies a
        # channel's prefetch to each consumer started after it, apart.
        self._queues = ((settings.queue, settings.prefetch or pool_size), *settings.more_queues)
        self._publisher = BatchPublisher(connection.channel())
        self._deliveries: HeldDeliveries[U] = HeldDeliveries(work.line)
        self.stats = stats if stats is not None else ConsumerStats()
        self._outcomes: OutcomeFlush[U, T] = OutcomeFlush(
            connection,
            self._channel,
            self._publisher,
            self._deliveries,
            work.flush,
            self.stats,
            settings.hold_unrouted,
            work.reroute,
        )
        self._admit_scheduled = False
        self._prepare_failures = 0
        self._prepare_retry = False
        self._consumer_tags: list[str] = []

    @property
    def held(self) -> int:
        """Deliveries taken from the queue and not yet settled (safe from any thread)."""
        return self._deliveries.held

    @property
    def active(self) -> int:
        """How many units are running now or finished and not yet flushed."""
        return self._runs.running + self._outcomes.pending

    def running_for(self, now: float) -> dict[str, float]:
        """How long (seconds) the runs of each kind going now have gone: the lower
        median over that kind's runs (``now`` monotonic); empty when the consumer tells
        no kinds apart.

        The median, not the oldest: among a few dozen quick runs on a busy box one is
        always slow, and only when most of a kind's runs are slow is the kind slow.
        """
        if self._kind is None:
            return {}
        gone: dict[str, list[float]] = {}
        for run in self._runs.going():
            kind = self._kind(run.unit)
            if kind is not None:
                gone.setdefault(kind, []).append(now - run.started)
        return {kind: median_low(times) for kind, times in gone.items()}

    @property
    def waiting(self) -> int:
        """How many units arrived and wait for a free slot."""
        return self._deliveries.waiting

    def wake(self) -> None:
        """Start waiting units in slots freed outside the pool; safe from any thread."""
        try:
            self._connection.add_callback_threadsafe(self._admit)
        except AMQPError:
            pass  # the connection is gone; its deliveries go back to the queue

    def start(self) -> None:
        """Begin consuming; messages are handled while the connection processes events."""
        self._consume()
        if self._ack_deadline is not None:
            self._connection.call_later(self._sweep_interval(), self._ack_overdue)

    def stop_consuming(self) -> None:
        """Take no new messages; running units finish and are flushed, waiting ones go back."""
        self._stopping = True
        for tag in self._consumer_tags:
            self._channel.basic_cancel(tag)
        self._consumer_tags = []
        self._give_back(self._deliveries.waiting_tags())

    def resume_consuming(self) -> None:
        """Take messages again after ``stop_consuming`` (an operator's drain lifted)."""
        self._stopping = False
        if not self._consumer_tags:
            self._consume()
        self._admit()

    def _consume(self) -> None:
        for queue, prefetch in self._queues:
            self._channel.basic_qos(prefetch_count=prefetch)
            self._consumer_tags.append(self._channel.basic_consume(queue, self._on_message))

    def close(self) -> None:
        """Release the pool; call after the connection stopped processing.

        Runs admitted but not yet picked up by a pool thread are cancelled: their
        deliveries go back to the queue with the connection, and ``release`` is given
        their items, so whatever admitting them claimed (the worker's started key) does
        not make the redelivered copy look like an interrupted run. Outcomes still
        waiting for a flush go to ``orphaned``.
        """
        never_ran = self._runs.shutdown()
        pending = self._outcomes.take_pending()
        if self._orphaned is not None:
            for outcome in pending:
                self._orphaned(outcome)
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
        ran_before = method.redelivered or RAN_BEFORE in (props.headers or {})
        if ran_before and self._note_redelivered is not None:
            self._note_redelivered(units)
        self._deliveries.receive(tag, units, time.monotonic())
        if not self._admit_scheduled:
            self._admit_scheduled = True
            self._connection.add_callback_threadsafe(self._admit)

    def _admit(self) -> None:
        """Start as many waiting units as there are free pool slots."""
        self._admit_scheduled = False
        free = self._pool_size - self._runs.running
        if self._occupied is not None:
            free -= self._occupied()
        if free <= 0 or not self._deliveries.waiting or self._stopping or self._prepare_retry:
            return
        batch = self._deliveries.take(free)
        if not batch:
            return  # the line holds units none of which may start yet
        try:
            items = self._prepare([unit for _, unit in batch])
        except Exception as e:
            self._prepare_failed(batch, e)
            return
        self._prepare_failures = 0
        now = time.monotonic()
        for tag, _ in batch:
            self._deliveries.start(tag, now)
        runs = [(tag, unit, item) for (tag, unit), item in zip(batch, items, strict=True)]
        self._runs.submit(runs, now)

    def _prepare_failed(self, batch: list[tuple[int, U]], error: Exception) -> None:
        """Keep the units waiting and try again after a jittered backoff.

        Given back to the queue, they would come straight back while the store that
        ``prepare`` needs (Redis) is down: a tight loop of nacks and redeliveries.
        Held here, they stay this consumer's; the ack deadline and stopping still give
        them back as usual.
        """
        self._deliveries.put_back(batch)
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

    def _drain_finished(self, finished: Finished[U, T]) -> None:
        for run, future in finished:
            self._collect(run, future)
        self._admit()

    def _collect(self, run: Run[U], future: Future[T]) -> None:
        try:
            outcome = future.result()
        except Exception as e:
            if is_lock_conflict(e):
                # Its stage ran the transaction again and gave up: rows fought over, not
                # a store down. One line; the copy sent back runs the unit again.
                log.warning("run met a lock conflict it did not settle (%r); sending it back", e)
            else:
                log.exception("run failed outside its own error handling; sending it back")
            # Its run started, and may have had effects before it raised: the copy is
            # marked so that it is taken as a redelivery (``redelivered``), as the
            # broker's own redelivery of an unacked delivery would be.
            again = self._rest(run.tag, [run.unit])
            self._publisher.publish([replace(again, headers={RAN_BEFORE: 1})])
            if self._deliveries.close_unit(run.tag):
                self._channel.basic_ack(run.tag)
            return
        # Timed here, where the run gave its slot back: what waits for the flush after
        # this holds no slot, and the heartbeat's average bounds the worker's queue by
        # what its slots start (``common.slots``).
        now = time.monotonic()
        kind = self._kind(run.unit) if self._kind is not None else None
        self.stats.timed(now, now - run.started, kind)
        self._outcomes.add(run.tag, outcome)

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
        rests = self._deliveries.withdraw(tags)
        messages: list[OutgoingMessage] = []
        for tag, units in rests.items():
            if self._deliveries.give_back(tag):
                self._channel.basic_nack(tag, requeue=True)
            else:
                messages.append(self._rest(tag, units))
        if not messages:
            return
        self._publisher.publish(messages)
        for tag in rests:
            if self._deliveries.settle_if_complete(tag):
                self._channel.basic_ack(tag)

    def _sweep_interval(self) -> float:
        assert self._ack_deadline is not None
        return max(0.2, min(60.0, self._ack_deadline / 4))

    def _ack_overdue(self) -> None:
        assert self._ack_deadline is not None
        overdue = self._deliveries.overdue(time.monotonic(), self._ack_deadline)
        # Units still waiting for a slot go back before the broker's consumer timeout
        # closes the channel; the runs still going are acked early.
        waiting = self._deliveries.with_waiting(overdue)
        self._give_back(waiting)
        early = self._deliveries.still_held(overdue)
        for tag in early:
            self._deliveries.mark_acked_early(tag)
            self._channel.basic_ack(tag)
        if waiting:
            log.info("gave the waiting units of %d deliveries back to the queue", len(waiting))
        if early:
            log.info("acked %d long-running deliveries early", len(early))
        self._connection.call_later(self._sweep_interval(), self._ack_overdue)
