"""What a pooled consumer counts of its runs, for its service's heartbeat and metrics."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# How much a new run's time weighs in its kind's pace: a handler whose runs became slow
# reads as slow after a few of them, not after a window of fast ones has aged out.
PACE_WEIGHT = 0.3


@dataclass
class ConsumerStats:
    """Counts the owning service reports in its heartbeat or metrics.

    ``durations`` holds (finished at, seconds taken) of the latest runs, monotonic time;
    ``paces`` the run time of each kind of unit (a worker's handlers), in seconds,
    weighted towards the latest runs.
    """

    finished: int = 0
    failed_runs: int = 0
    durations: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=10_000))
    paces: dict[str, float] = field(default_factory=dict)

    def timed(self, at: float, seconds: float, kind: str | None = None) -> None:
        """Count one run that took ``seconds`` and ended at ``at`` (monotonic); ``kind``
        names what it ran, when its consumer tells kinds apart."""
        self.durations.append((at, seconds))
        if kind is not None:
            last = self.paces.get(kind)
            self.paces[kind] = (
                seconds if last is None else PACE_WEIGHT * seconds + (1 - PACE_WEIGHT) * last
            )
