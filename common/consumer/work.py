"""What a ``PooledConsumer`` consumes and how (``ConsumerSettings``), and what it does
with each unit of work it takes (``ConsumerWork``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from common.broker import OutgoingMessage
from common.consumer.outcome_flush import Reroute
from common.consumer.unit_packing import Packing
from common.consumer.waiting_line import WaitingLine

U = TypeVar("U")
P = TypeVar("P")
T = TypeVar("T")


@dataclass(frozen=True)
class ConsumerSettings:
    """The queue consumed, and how much is held and run at once.

    ``pool_size`` units run at once (in as many threads, or as tasks a ``ConsumerWork``
    with ``start`` runs where it will); ``prefetch`` deliveries (default: the pool size)
    are held. ``more_queues`` are consumed on the same channel as well, each with its
    own prefetch, their units sharing the pool and the line (the unstarted rest of a
    delivery goes back to ``queue``). ``ack_deadline`` (seconds), when set, acks a
    delivery still held that long after it arrived (RabbitMQ closes a channel that
    keeps a delivery unacked past its consumer_timeout, which would cut a long job off).
    ``hold_unrouted`` keeps a delivery unacked while output of its units comes back
    unroutable, publishing that output again after a jittered backoff until a queue
    takes it.
    """

    queue: str
    pool_size: int
    prefetch: int | None = None
    ack_deadline: float | None = None
    hold_unrouted: bool = False
    more_queues: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ConsumerWork(Generic[U, P, T]):
    """The steps a unit of work goes through, and the optional hooks.

    ``packing`` reads a body's units; ``prepare(units)`` runs in the connection thread,
    once for the units started together, and turns each into the item ``run`` gets in
    the pool; ``flush(outcomes)`` returns the messages to publish for outcomes that
    finished close together. ``start(item)``, when given, replaces the pool's threads:
    it starts the item's run wherever it runs (a task on an event loop) and returns its
    future, and ``run`` is not called.

    Hooks: ``release(items)`` is told of prepared items given back unstarted;
    ``occupied()`` counts slots held outside the pool (fewer units start while it is
    above zero); ``redelivered(units)`` is told the units of a delivery the broker
    marks as delivered before, ahead of their ``prepare``; ``orphaned(outcome)`` gets
    each outcome that can no longer be flushed (its connection closed); ``reroute`` is
    handed unroutable output first and returns what to publish again; ``line`` is
    where units wait for a slot and which start first (arrival order by default): one
    line per consumer, as it holds that channel's delivery tags; ``kind(unit)`` names
    what a unit runs, so that run times are counted per kind too (``ConsumerStats``).
    """

    packing: Packing[U]
    prepare: Callable[[Sequence[U]], Sequence[P]]
    run: Callable[[P], T] | None
    flush: Callable[[Sequence[T]], Sequence[OutgoingMessage]]
    release: Callable[[Sequence[P]], object] | None = None
    occupied: Callable[[], int] | None = None
    redelivered: Callable[[Sequence[U]], object] | None = None
    orphaned: Callable[[T], object] | None = None
    reroute: Reroute | None = None
    line: WaitingLine[U] | None = None
    kind: Callable[[U], str | None] | None = None
    start: Callable[[P], Future[T]] | None = None
