"""Saying that the worker's fence closed, from a thread of its own.

A heartbeat that fails says so when it fails; one that hangs (a store that neither
answers nor resets the connection) never comes back to say anything, while the fence
closes all the same and the worker quietly starts nothing. The watch looks at the fence
a few times per fence limit and logs each closing once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.worker.fence import Fence

log = logging.getLogger(__name__)

# Looks per fence limit: a closing is said within a quarter of the limit.
LOOKS_PER_LIMIT = 4
LONGEST_PERIOD_S = 1.0


class FenceWatch:
    """Logs, once per closing, that ``fence`` closed and ``why`` (who is to blame)."""

    def __init__(self, fence: Fence, worker_id: str, why: Callable[[], str]) -> None:
        self._fence = fence
        self._worker_id = worker_id
        self._why = why
        self._period = min(fence.limit / LOOKS_PER_LIMIT, LONGEST_PERIOD_S)
        self._said = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fence-watch", daemon=True)

    def start(self) -> None:
        """Start looking in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop looking."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._period + 1)

    def check(self) -> None:
        """Look once: log a closing not said yet; forget it once the fence is open.

        Also called just before a landed heartbeat reopens the fence, so a closing
        shorter than the watch's period is said before its reopening is.
        """
        closed = self._fence.closed
        with self._lock:
            if not closed:
                self._said = False
                return
            if self._said:
                return
            self._said = True
        log.error(
            "no heartbeat landed for %.0f s (%s): starting no new runs until one does, so "
            "the leader cannot retry a run elsewhere while this worker starts it",
            self._fence.limit,
            self._why(),
            extra={"worker_id": self._worker_id},
        )

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self.check()
