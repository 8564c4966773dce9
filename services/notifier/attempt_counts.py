"""The notifier's attempts counted by outcome and logged as one line a while.

At thousands of callbacks a second an INFO line per attempt costs more than the
signing; an operator reads the counts, and the failures, each still on a line of its
own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

log = logging.getLogger(__name__)

# How often the counts are logged, while there were attempts.
COUNT_SECONDS = 10.0


class AttemptCounts:
    """Counts attempts by outcome from any thread; ``maybe_log`` writes the counts since
    the last line once ``every`` seconds have passed and there were any."""

    def __init__(
        self, every: float = COUNT_SECONDS, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._every = every
        self._now = now
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._since = now()

    def add(self, outcome: str) -> None:
        """One attempt more that ended in ``outcome``."""
        with self._lock:
            self._counts[outcome] += 1

    def maybe_log(self, at_once: bool = False) -> None:
        """Log the counts since the last line, if it is time (or ``at_once``: the
        notifier is stopping) and there are any."""
        now = self._now()
        with self._lock:
            if now - self._since < self._every and not at_once:
                return
            counts, self._counts = self._counts, Counter()
            seconds, self._since = now - self._since, now
        if counts:
            log.info(
                "callback attempts in the last %.0f s: %s",
                seconds,
                ", ".join(f"{outcome} {n}" for outcome, n in sorted(counts.items())),
            )
