"""Flushing a pooled consumer's finished outcomes: publish their output, then ack.

Outcomes that finish close together are flushed as one batch: one transaction for
their output messages (none when they have no output), then the acks of the deliveries
the batch completes, framed together and sent in one write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Generic, TypeVar

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from common.broker import BatchPublisher, OutgoingMessage
from common.consumer.held_deliveries import HeldDeliveries
from common.consumer.stats import ConsumerStats
from common.runtime import backoff_seconds

log = logging.getLogger(__name__)

U = TypeVar("U")
T = TypeVar("T")

Reroute = Callable[[Sequence[OutgoingMessage]], Sequence[OutgoingMessage]]


class OutcomeFlush(Generic[U, T]):
    """Gathers finished outcomes in the connection thread and flushes them in batches.

    ``flush(outcomes)`` turns a batch into its output messages. ``hold_unrouted`` keeps
    the batch's deliveries unacked while output comes back unroutable, publishing it
    again after a jittered backoff (through ``reroute`` first, when given).
    """

    def __init__(
        self,
        connection: BlockingConnection,
        channel: BlockingChannel,
        publisher: BatchPublisher,
        deliveries: HeldDeliveries[U],
        flush: Callable[[Sequence[T]], Sequence[OutgoingMessage]],
        stats: ConsumerStats,
        hold_unrouted: bool = False,
        reroute: Reroute | None = None,
    ) -> None:
        self._connection = connection
        self._channel = channel
        self._publisher = publisher
        self._deliveries = deliveries
        self._flush_fn = flush
        self._stats = stats
        self._hold_unrouted = hold_unrouted
        self._reroute = reroute
        self._done: list[tuple[int, T]] = []
        self._flush_scheduled = False

    @property
    def pending(self) -> int:
        """Outcomes finished and not yet flushed."""
        return len(self._done)

    def add(self, tag: int, outcome: T) -> None:
        """Flush ``outcome`` of a unit of delivery ``tag`` with the others finished by then."""
        self._done.append((tag, outcome))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._connection.add_callback_threadsafe(self._flush)

    def take_pending(self) -> list[T]:
        """The outcomes not flushed yet, forgotten here (the consumer is closing)."""
        done, self._done = self._done, []
        return [outcome for _tag, outcome in done]

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._done = self._done, []
        if not batch:
            return
        messages = self._flush_fn([outcome for _, outcome in batch])
        self._publish_then_settle(batch, messages, 0)

    def _publish_then_settle(
        self, batch: list[tuple[int, T]], messages: Sequence[OutgoingMessage], tries: int
    ) -> None:
        """Publish a batch's output, then ack its deliveries; with ``hold_unrouted``,
        output the broker returned (no queue took it) is published again after a
        jittered backoff, and its deliveries stay unacked until it lands.

        A batch without output (every callback delivered, say) is settled at once: a
        commit with nothing in it would cost a broker round trip for no guarantee."""
        returned = self._publisher.publish(messages) if messages else set()
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

    def _settle_flushed(self, batch: list[tuple[int, T]]) -> None:
        """Ack the deliveries a published batch completes."""
        done: list[int] = []
        for tag, _ in batch:
            if self._deliveries.close_unit(tag):
                done.append(tag)
        up_to, singles = self._deliveries.ack_plan(done)
        self._send_acks(up_to, singles)
        self._stats.finished += len(batch)

    def _send_acks(self, up_to: int | None, singles: list[int]) -> None:
        """Frame every ack, then send them in one write: the blocking channel's own
        ``basic_ack`` runs the I/O loop after each (a poll and a send per ack)."""
        acks = [(tag, False) for tag in singles]
        if up_to is not None:
            acks.insert(0, (up_to, True))
        if not acks:
            return
        frame_only = self._channel._impl
        for tag, multiple in acks[:-1]:
            frame_only.basic_ack(tag, multiple=multiple)
        last, multiple = acks[-1]
        self._channel.basic_ack(last, multiple=multiple)
