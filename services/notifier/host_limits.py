"""How many attempts at once each receiving host gets: fewer while it is slow or failing.

Like a circuit breaker per host, but graded: a host that fails an attempt (no answer in
time, a refused connection, 429 or 5xx) has its limit halved, one that answers slower
than ``slow_seconds`` loses one down to ``slow_floor``, and each quick answer gives back
a little (one more slot per ``limit`` quick answers, as TCP's congestion window grows),
up to ``ceiling``. The slow host's backlog waits in the notifier's line; no other
host's callbacks wait with it.
"""

from __future__ import annotations

from dataclasses import dataclass

# How much of each new answer time goes into a host's recent latency.
LATENCY_WEIGHT = 0.2


@dataclass
class HostLimit:
    """One host's limit on attempts at once, and how its recent answers went."""

    limit: float
    latency_s: float | None = None
    attempts: int = 0
    failures: int = 0


class HostLimits:
    """The adaptive limit of every receiving host seen (by share key). Not thread-safe
    by itself: ``AttemptScheduler`` holds the lock."""

    def __init__(self, ceiling: int, slow_seconds: float, slow_floor: int = 1) -> None:
        self._ceiling = max(1, ceiling)
        self._slow = slow_seconds
        self._slow_floor = max(1, min(slow_floor, self._ceiling))
        self._hosts: dict[str, HostLimit] = {}

    def limit_of(self, host: str) -> int:
        """How many attempts ``host`` may have going at once now."""
        found = self._hosts.get(host)
        return int(found.limit) if found is not None else self._ceiling

    def standing(self, host: str) -> HostLimit | None:
        """The host's limit and recent answers; None when it had no attempt yet."""
        return self._hosts.get(host)

    def hosts(self) -> list[str]:
        """Every host with a standing."""
        return list(self._hosts)

    def record(self, host: str, seconds: float, failed: bool) -> None:
        """One attempt to ``host`` took ``seconds`` and failed or not: adjust its limit."""
        found = self._hosts.setdefault(host, HostLimit(float(self._ceiling)))
        found.attempts += 1
        found.latency_s = (
            seconds
            if found.latency_s is None
            else found.latency_s + LATENCY_WEIGHT * (seconds - found.latency_s)
        )
        if failed:
            found.failures += 1
            found.limit = max(1.0, found.limit / 2)
        elif seconds >= self._slow:
            if found.limit > self._slow_floor:
                found.limit = max(float(self._slow_floor), found.limit - 1)
        else:
            found.limit = min(float(self._ceiling), found.limit + 1 / max(1.0, found.limit))

    def forget_idle(self, keep: set[str]) -> None:
        """Drop the standings of hosts back at their ceiling and not in ``keep``: a
        notifier that posts to many hosts over its life does not keep them all."""
        for host in [h for h, s in self._hosts.items() if h not in keep]:
            if self._hosts[host].limit >= self._ceiling:
                del self._hosts[host]
