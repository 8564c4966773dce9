"""One clock for the cluster: Redis TIME, read rarely and extended with the local monotonic.

Due checks and heartbeat staleness must not depend on each host's wall clock, or a
skewed host could fire a job early or declare a live worker dead. Reading Redis TIME on
every check would cost a round trip, so the offset is refreshed every few seconds.

Once it has been read, the offset outlives a Redis outage: a refresh that fails keeps
the last offset (monotonic time does not jump, and hosts' clocks drift by milliseconds
a day) and is tried again at the next reading. A reading that raised instead failed
whatever asked for the time, such as a worker stamping the end of a run whose handler
had already had its effects.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import redis

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""How long after a failed refresh the next one is tried."""

CLOCK_SLACK_MS = 1_000
"""Slack for the cluster clock as two hosts read it (each caches Redis TIME)."""


class Clock(Protocol):
    """What a stage needs of the cluster clock: the time now (``ClusterClock``, or a
    clock a unit test sets)."""

    def now_ms(self) -> int:
        """The cluster time in epoch milliseconds."""
        ...


class ClusterClock:
    """Milliseconds since the epoch as Redis sees them."""

    def __init__(self, client: redis.Redis, refresh_seconds: float = 5.0) -> None:
        self._client = client
        self._refresh = refresh_seconds
        self._lock = threading.Lock()
        self._offset_ms = 0.0
        self._synced_at = -1e18

    def _sync(self) -> None:
        before = time.monotonic()
        seconds, micros = self._client.time()
        after = time.monotonic()
        server_ms = seconds * 1000 + micros / 1000
        self._offset_ms = server_ms - (before + after) / 2 * 1000
        self._synced_at = after

    def fresh(self) -> bool:
        """Whether ``now_ms`` would answer without asking Redis."""
        return time.monotonic() - self._synced_at <= self._refresh

    def now_ms(self) -> int:
        """The cluster time in epoch milliseconds. Raises ``redis.RedisError`` only
        while Redis has never answered."""
        with self._lock:
            if time.monotonic() - self._synced_at > self._refresh:
                self._refresh_offset()
            return int(time.monotonic() * 1000 + self._offset_ms)

    def _refresh_offset(self) -> None:
        try:
            self._sync()
        except redis.RedisError:
            if self._synced_at < 0:
                raise
            # Tried again in a second, not at every reading: with Redis cut off, each
            # try can wait for the socket's timeout.
            self._synced_at = time.monotonic() - self._refresh + RETRY_SECONDS
            log.warning("cluster clock not refreshed (Redis unavailable); keeping its offset")


def wall_ms() -> int:
    """This host's wall clock in epoch ms, for places with no cluster clock (logs)."""
    return int(time.time() * 1000)
