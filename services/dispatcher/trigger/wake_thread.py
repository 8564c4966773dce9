"""Wake-ups from the API: a Redis list popped by a background thread into an Event.

The main loop waits on the Event with a precise timeout (the next execution's time)
while this thread blocks on Redis, so firing precision does not depend on how Redis
times out blocked clients.
"""

from __future__ import annotations

import logging
import threading

import redis

from common.runtime import backoff_seconds

log = logging.getLogger(__name__)


class WakeListener:
    """Sets ``event`` whenever the API pushes to the wake list."""

    def __init__(self, client: redis.Redis, key: str, stop: threading.Event) -> None:
        self.event = threading.Event()
        self._client = client
        self._key = key
        self._stop = stop
        self._thread = threading.Thread(target=self._loop, name="wake", daemon=True)

    def start(self) -> None:
        """Start listening in the background."""
        self._thread.start()

    def wait(self, seconds: float) -> bool:
        """Sleep until woken or ``seconds`` pass; True when woken. Clears the wake-up."""
        woken = self.event.wait(max(0.0, seconds))
        self.event.clear()
        return woken

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._client.blpop([self._key], timeout=1):
                    self._client.delete(self._key)
                    self.event.set()
                failures = 0
            except redis.RedisError as e:
                failures += 1
                wait = backoff_seconds(failures)
                log.warning("wake-up listener: %s; retrying in %.1f s", e, wait)
                self._stop.wait(wait)
