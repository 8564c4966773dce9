"""The deliveries a pooled consumer holds unacked, and the units of theirs waiting for a slot.

Pure bookkeeping, kept in the connection thread: the consumer asks it which units to
start, which deliveries are complete, which go back to the queue and which to ack;
the channel calls stay with the consumer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from common.consumer.ack_plan import plan_acks
from common.consumer.waiting_line import FifoLine, WaitingLine

U = TypeVar("U")


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


class HeldDeliveries(Generic[U]):
    """Deliveries taken from the queue and not yet settled, by delivery tag.

    A delivery's units wait in ``line`` (arrival order by default) until a pool slot
    takes them; it is settled (forgotten) once each of its units ran and was flushed or
    was given back.
    """

    def __init__(self, line: WaitingLine[U] | None = None) -> None:
        self._in_flight: dict[int, _Delivery] = {}
        self._line: WaitingLine[U] = line if line is not None else FifoLine()

    @property
    def held(self) -> int:
        """Deliveries held and not yet settled (safe from any thread)."""
        return len(self._in_flight)

    @property
    def waiting(self) -> int:
        """Units that arrived and wait for a free slot."""
        return len(self._line)

    def receive(self, tag: int, units: Sequence[U], now: float) -> None:
        """Hold delivery ``tag``; its units wait for slots."""
        self._in_flight[tag] = _Delivery(arrived=now, waiting=len(units))
        for unit in units:
            self._line.add(tag, unit)

    def take(self, slots: int) -> list[tuple[int, U]]:
        """Up to ``slots`` waiting units that may start, in the line's order, with their
        delivery tags."""
        return self._line.take(slots)

    def put_back(self, batch: Sequence[tuple[int, U]]) -> None:
        """Return units ``take`` gave, unstarted, to the head of the line."""
        self._line.put_back(batch)

    def start(self, tag: int, now: float) -> None:
        """One unit of delivery ``tag`` started running."""
        delivery = self._in_flight[tag]
        delivery.waiting -= 1
        delivery.open += 1
        if delivery.started is None:
            delivery.started = now

    def close_unit(self, tag: int) -> bool:
        """One started unit of ``tag`` was flushed or sent back; True to ack ``tag`` now."""
        self._in_flight[tag].open -= 1
        return self.settle_if_complete(tag)

    def settle_if_complete(self, tag: int) -> bool:
        """Forget ``tag`` if held and complete; True when the caller is to ack it now."""
        delivery = self._in_flight.get(tag)
        if delivery is None or not delivery.complete:
            return False
        return not self._in_flight.pop(tag).acked_early

    def ack_plan(self, done: Iterable[int]) -> tuple[int | None, list[int]]:
        """``plan_acks`` for ``done`` against the deliveries still awaiting their ack."""
        unacked = [tag for tag, delivery in self._in_flight.items() if not delivery.acked_early]
        return plan_acks(done, unacked)

    def waiting_tags(self) -> set[int]:
        """The deliveries some of whose units wait for a slot."""
        return self._line.tags()

    def withdraw(self, tags: set[int]) -> dict[int, list[U]]:
        """Take the waiting units of these deliveries out of the line, by delivery."""
        return self._line.withdraw(tags)

    def give_back(self, tag: int) -> bool:
        """Its withdrawn units no longer wait; True (and forgotten) when none ever started."""
        delivery = self._in_flight[tag]
        delivery.waiting = 0
        if delivery.started is None:
            del self._in_flight[tag]
            return True
        return False

    def overdue(self, now: float, deadline: float) -> list[int]:
        """Deliveries held ``deadline`` seconds or more and not acked early."""
        return [
            tag
            for tag, delivery in self._in_flight.items()
            if not delivery.acked_early and now - delivery.arrived >= deadline
        ]

    def with_waiting(self, tags: Iterable[int]) -> set[int]:
        """Those of ``tags`` some of whose units wait for a slot."""
        return {tag for tag in tags if self._in_flight[tag].waiting}

    def still_held(self, tags: Iterable[int]) -> list[int]:
        """Those of ``tags`` not yet settled."""
        return [tag for tag in tags if tag in self._in_flight]

    def mark_acked_early(self, tag: int) -> None:
        """``tag`` is acked before its runs end; it is forgotten, not acked, when they do."""
        self._in_flight[tag].acked_early = True
