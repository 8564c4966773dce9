"""The delivery rows the notifier's attempts read before their POSTs, read ahead.

A callback that waits in the line has its delivery row read while it waits, in the
gathered reads of the callbacks that arrived with it, so that its attempt, once it
has its place, goes straight to its POST instead of holding that place through a MySQL
round trip. MySQL stays the truth: a row read more than ``READ_AHEAD_SECONDS`` before
the attempt is read again, and so is one that said the callback must wait for an
earlier run's (that one may have landed since). A delivery that became DELIVERED
after its row was read ahead may be posted again, with the same webhook-id, as a copy
posted between its read and its POST always could.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from common.db.deliveries import DeliveryToSend
from services.notifier.gathering import Gathered

# How old a row read ahead may be when its attempt uses it: a few times what a full
# line of a fast receiver waits, far under any retry delay.
READ_AHEAD_SECONDS = 5.0

Found = DeliveryToSend | None


class DeliveryReads:
    """Delivery rows by delivery id, read in gathered batches, some ahead; on the
    poster's loop only."""

    def __init__(
        self,
        reads: Gathered[str, Found],
        fresh_for: float = READ_AHEAD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reads = reads
        self._fresh_for = fresh_for
        self._clock = clock
        # By delivery id, oldest first: when the read was asked for, and its answer.
        self._ahead: dict[str, tuple[float, asyncio.Future[Found]]] = {}

    def __len__(self) -> int:
        """How many rows read ahead wait for their attempts."""
        return len(self._ahead)

    def read_ahead(self, delivery_ids: Sequence[str]) -> None:
        """Start reading these deliveries' rows for their attempts to come."""
        now = self._clock()
        self._forget_stale(now)
        for delivery_id in delivery_ids:
            answer = self._reads.start(delivery_id)
            answer.add_done_callback(_retrieved)
            self._ahead.pop(delivery_id, None)
            self._ahead[delivery_id] = (now, answer)

    async def read(self, delivery_id: str) -> Found:
        """The delivery's row for its attempt: the one read ahead if it is fresh and
        says the callback may go (or is gone), else read now."""
        ahead = self._ahead.pop(delivery_id, None)
        if ahead is not None and self._clock() - ahead[0] < self._fresh_for:
            try:
                found = await ahead[1]
            except Exception:
                pass  # read again below: the error, if it lasts, is the attempt's
            else:
                if found is None or not found.held:
                    return found
        return await self._reads.call(delivery_id)

    def _forget_stale(self, now: float) -> None:
        """Drop rows read ahead whose attempts never came in time (their callbacks were
        parked, or given back to the queue)."""
        while self._ahead:
            delivery_id, (asked, _) = next(iter(self._ahead.items()))
            if now - asked < self._fresh_for:
                return
            del self._ahead[delivery_id]


def _retrieved(answer: asyncio.Future[Found]) -> None:
    """Mark an answer's error as seen: a row read ahead and never used must not log
    "exception never retrieved"; its attempt, if it comes, reads again."""
    if not answer.cancelled():
        answer.exception()
