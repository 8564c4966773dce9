"""The leader's loops say they are moving; the lease is kept only while they do.

A leader whose dispatch loop hangs (a MySQL statement on a connection that neither
answers nor closes) would otherwise keep renewing its lease from its own thread, and
every standby would wait for as long as the hang lasts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LoopProgress:
    """When each of the leader's loops last finished a pass, by the monotonic clock.

    A loop beats at every pass while it leads and is forgotten when it stops leading;
    one that hangs keeps its last beat, which grows old, so this dispatcher neither
    renews its lease nor takes it again until the loop comes back.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._beats: dict[str, float] = {}
        self._lock = threading.Lock()

    def beat(self, loop: str) -> None:
        """``loop`` finished a pass (or started leading) just now."""
        with self._lock:
            self._beats[loop] = self._clock()

    def forget(self, loop: str) -> None:
        """``loop`` stopped leading: its age no longer counts."""
        with self._lock:
            self._beats.pop(loop, None)

    def stalled(self, bound_s: float) -> tuple[str, float] | None:
        """The loop whose last beat is the oldest, with its age in seconds, when that age
        is past ``bound_s``; None while every loop moves (or none leads)."""
        now = self._clock()
        with self._lock:
            if not self._beats:
                return None
            loop, last = min(self._beats.items(), key=lambda item: item[1])
        age = now - last
        return (loop, age) if age > bound_s else None
