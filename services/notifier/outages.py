"""Waiting out a MySQL outage in the notifier instead of sending callbacks round in a loop.

A delivery that cannot read or record its row raises; its message goes back to the
callbacks queue and comes straight back. Without a pause every pool thread would spin
through the queue as fast as the broker hands it out. The pool thread that met the
outage waits first, longer after each failure in a row (``backoff_seconds``: doubling
up to 10 s, jittered so notifiers do not come back in step).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from common.runtime import backoff_seconds
from common.store_errors import is_store_outage

log = logging.getLogger(__name__)

T = TypeVar("T")


class StoreBackoff:
    """Counts store failures in a row across threads; ``run`` waits after each."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._failures = 0
        self._lock = threading.Lock()
        self._sleep = sleep

    @property
    def failures(self) -> int:
        """Store failures in a row so far."""
        return self._failures

    def run(self, work: Callable[[], T]) -> T:
        """``work()``; after a store outage, wait a jittered while, then raise it again."""
        try:
            result = work()
        except Exception as e:
            if not is_store_outage(e):
                raise
            with self._lock:
                self._failures += 1
                failures = self._failures
            pause = backoff_seconds(failures)
            log.warning(
                "store unavailable (%s); waiting %.1f s before the next try",
                type(e).__name__,
                pause,
            )
            self._sleep(pause)
            raise
        if self._failures:
            with self._lock:
                self._failures = 0
        return result
