"""What a pooled consumer counts of its runs, for its service's heartbeat and metrics."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class ConsumerStats:
    """Counts the owning service reports in its heartbeat or metrics.

    ``durations`` holds (finished at, seconds taken) of the latest runs, monotonic time.
    """

    finished: int = 0
    failed_runs: int = 0
    durations: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=10_000))
