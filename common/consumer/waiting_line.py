"""The line a pooled consumer's units wait in for a slot, and the order they leave it in.

The default, ``FifoLine``, starts units in arrival order. A consumer whose units may
not all start at once (the notifier's callbacks, each bound by its app's and its
host's share) gives its own line: ``take`` then hands out only the units that may
start now, in its own order, and the others wait without holding a slot or the units
behind them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol, TypeVar

U = TypeVar("U")


class WaitingLine(Protocol[U]):
    """Units that arrived and wait for a slot, with the delivery tags they came in."""

    def __len__(self) -> int:
        """How many units wait."""

    def add(self, tag: int, unit: U) -> None:
        """One more unit, of delivery ``tag``, waits."""

    def take(self, slots: int) -> list[tuple[int, U]]:
        """Up to ``slots`` units that may start now, taken out of the line."""

    def put_back(self, batch: Sequence[tuple[int, U]]) -> None:
        """Units ``take`` gave, unstarted, wait again, ahead of the others."""

    def tags(self) -> set[int]:
        """The deliveries some of whose units wait."""

    def withdraw(self, tags: set[int]) -> dict[int, list[U]]:
        """Take the waiting units of these deliveries out of the line, by delivery."""


class FifoLine(WaitingLine[U]):
    """Units start in arrival order."""

    def __init__(self) -> None:
        self._arrived: deque[tuple[int, U]] = deque()

    def __len__(self) -> int:
        """How many units wait."""
        return len(self._arrived)

    def add(self, tag: int, unit: U) -> None:
        """One more unit waits, last."""
        self._arrived.append((tag, unit))

    def take(self, slots: int) -> list[tuple[int, U]]:
        """Up to ``slots`` units, oldest first."""
        return [self._arrived.popleft() for _ in range(min(slots, len(self._arrived)))]

    def put_back(self, batch: Sequence[tuple[int, U]]) -> None:
        """Return units to the head of the line, in their order."""
        self._arrived.extendleft(reversed(batch))

    def tags(self) -> set[int]:
        """The deliveries some of whose units wait."""
        return {tag for tag, _ in self._arrived}

    def withdraw(self, tags: set[int]) -> dict[int, list[U]]:
        """Take the waiting units of these deliveries out of the line, by delivery."""
        rests: dict[int, list[U]] = {}
        kept: deque[tuple[int, U]] = deque()
        for tag, unit in self._arrived:
            if tag in tags:
                rests.setdefault(tag, []).append(unit)
            else:
                kept.append((tag, unit))
        self._arrived = kept
        return rests
