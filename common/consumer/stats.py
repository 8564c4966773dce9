"""What a pooled consumer counts of its runs, for its service's heartbeat and metrics."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# The latest runs kept, of all kinds and of each kind.
KEPT_RUNS = 10_000


@dataclass
class ConsumerStats:
    """Counts the owning service reports in its heartbeat or metrics.

    ``durations`` holds (finished at, seconds taken) of the latest runs, monotonic time;
    ``by_kind`` the same for each kind of unit (a worker's handlers), so that a
    service with one kind reads the same time for it as for all its runs.
    """

    finished: int = 0
    failed_runs: int = 0
    durations: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=KEPT_RUNS))
    by_kind: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)

    def timed(self, at: float, seconds: float, kind: str | None = None) -> None:
        """Count one run that took ``seconds`` and ended at ``at`` (monotonic); ``kind``
        names what it ran, when its consumer tells kinds apart."""
        self.durations.append((at, seconds))
        if kind is not None:
            kept = self.by_kind.get(kind)
            if kept is None:
                kept = self.by_kind[kind] = deque(maxlen=KEPT_RUNS)
            kept.append((at, seconds))
