"""When a failed callback is tried again: tiers of delays, each spread over delay buckets.

RabbitMQ does the waiting: a message waits in a queue whose every message lives as long
as the queue's TTL, then dead-letters back to the callbacks queue. A queue cannot jitter
its TTL, so each tier is spread over a few queues with delays around the tier's
(``BUCKETS`` of them, from ``1 - jitter`` to ``1 + jitter`` of it), and a message picks
one at random: thousands of callbacks that failed in one instant come back spread over
a fifth of their delay either side instead of all at once.

A receiver that answers 429 or 503 with ``Retry-After`` is waited for that long instead
(up to a cap), in the first queue of a fixed ladder of delays at least as long.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

BUCKETS = 5
# Delays (seconds) a Retry-After wait rounds up to; each is one queue.
RETRY_AFTER_RUNGS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800, 2700, 3600)


def spread(delay_ms: int, jitter: float) -> list[int]:
    """The bucket delays (ms) of a tier of ``delay_ms``, rounded to readable values:
    100 ms under 10 s, whole seconds above."""
    grain = 100 if delay_ms < 10_000 else 1000
    found: set[int] = set()
    for k in range(BUCKETS):
        factor = 1 - jitter + 2 * jitter * k / (BUCKETS - 1)
        found.add(max(grain, round(delay_ms * factor / grain) * grain))
    return sorted(found)


@dataclass(frozen=True)
class RetrySchedule:
    """The delays between attempts: ``tiers`` (seconds) after attempts 1, 2, ...; DEAD
    after the attempt that follows the last tier."""

    tiers: Sequence[int]
    jitter: float = 0.2
    retry_after_cap_seconds: int = 3600
    rng: random.Random = field(default_factory=random.Random, compare=False)

    @property
    def last_attempt(self) -> int:
        """The attempt after which a failing callback is DEAD."""
        return len(self.tiers) + 1

    def buckets(self, tier_index: int) -> list[int]:
        """The delay buckets (ms) of one tier."""
        return spread(self.tiers[tier_index] * 1000, self.jitter)

    def rungs(self) -> list[int]:
        """The Retry-After delays (ms) in use: the ladder up to the cap, and the cap."""
        cap = self.retry_after_cap_seconds
        return sorted({r * 1000 for r in RETRY_AFTER_RUNGS if r < cap} | {cap * 1000})

    def all_delays(self) -> list[int]:
        """Every delay (ms) a queue must exist for."""
        found = set(self.rungs())
        for index in range(len(self.tiers)):
            found.update(self.buckets(index))
        return sorted(found)

    def delay_after(self, attempt: int) -> int | None:
        """The delay (ms) before the attempt after ``attempt``; None when it was the last."""
        if attempt >= self.last_attempt or attempt < 1:
            return None
        return self.rng.choice(self.buckets(attempt - 1))

    def retry_after(self, seconds: float) -> int:
        """The delay (ms) that honours a receiver's ``Retry-After`` of ``seconds``."""
        wanted = max(0.0, seconds) * 1000
        rungs = self.rungs()
        return next((r for r in rungs if r >= wanted), rungs[-1])
