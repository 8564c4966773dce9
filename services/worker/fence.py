"""A worker's own fence: no new run starts while it cannot heartbeat.

The leader judges a worker dead once its heartbeat is ``KAIROS_HEARTBEAT_STALE_MS`` old
and its queue has no consumer, then records its runs LOST and retries them elsewhere.
A worker cut off from MySQL or Redis may still hold deliveries, and would go on
starting them while the leader retries them: two runs of one trigger at once. So a
worker whose last heartbeat that landed is older than ``FENCE_AFTER_BEATS`` intervals
starts nothing new (runs already going finish) until a heartbeat lands again.

The rule for operators: ``KAIROS_HEARTBEAT_STALE_MS`` must be at least
``FENCE_AFTER_BEATS + 1`` worker heartbeat intervals (15 s against 5 s by default), so
a worker fences itself at least one interval before any leader can judge it dead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

FENCE_AFTER_BEATS = 2


class Fence:
    """Closed while the last heartbeat that landed is older than the fence's limit."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = interval * FENCE_AFTER_BEATS
        self._clock = clock
        self._lock = threading.Lock()
        self._heard = clock()

    @property
    def limit(self) -> float:
        """Seconds without a heartbeat that landed before the fence closes."""
        return self._limit

    @property
    def closed(self) -> bool:
        """Whether new runs must wait (safe from any thread)."""
        with self._lock:
            return self._clock() - self._heard > self._limit

    def heard(self) -> bool:
        """Record a heartbeat that landed; True when this reopens a closed fence."""
        with self._lock:
            was_closed = self._clock() - self._heard > self._limit
            self._heard = self._clock()
            return was_closed


def minimum_stale_ms(heartbeat_seconds: float) -> int:
    """The least ``KAIROS_HEARTBEAT_STALE_MS`` that leaves a worker with this heartbeat
    interval room to fence itself before a leader judges it dead."""
    return int(heartbeat_seconds * (FENCE_AFTER_BEATS + 1) * 1000)
