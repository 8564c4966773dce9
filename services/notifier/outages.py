"""Waiting out a MySQL outage in the notifier instead of sending callbacks round in a loop.

A delivery that cannot read or record its row raises; its message goes back to the
callbacks queue and comes straight back. Without a pause every attempt slot would spin
through the queue as fast as the broker hands it out. The attempt that met the outage
waits first (on the event loop, holding its slot, never the loop itself), longer after
each failure in a row (``backoff_seconds``: doubling up to 10 s, jittered so notifiers
do not come back in step).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from common.runtime import backoff_seconds
from common.store_errors import is_store_outage

log = logging.getLogger(__name__)

T = TypeVar("T")


class StoreBackoff:
    """Counts store failures in a row across attempts; ``run`` waits after each.

    Used from one event loop: ``sleep`` is awaited there (``asyncio.sleep``, or a fake).
    """

    def __init__(self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self._failures = 0
        self._sleep = sleep

    @property
    def failures(self) -> int:
        """Store failures in a row so far."""
        return self._failures

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """``await work()``; after a store outage, wait a jittered while, then raise it again."""
        try:
            result = await work()
        except Exception as e:
            if not is_store_outage(e):
                raise
            self._failures += 1
            pause = backoff_seconds(self._failures)
            log.warning(
                "store unavailable (%s); waiting %.1f s before the next try",
                type(e).__name__,
                pause,
            )
            await self._sleep(pause)
            raise
        self._failures = 0
        return result
