"""Which callback attempts may start now: the shares, the hosts' adaptive limits, and one
attempt at a time per job, counted across the notifier's attempts.

The line (``services.notifier.fair_line``, served on the poster's loop by
``services.notifier.loop_line``) asks ``try_start``; the attempt, a task on that loop,
calls ``observe`` and ``posted`` as its POST ends (its app's and host's places are free
for the next attempt then: what follows, the attempt's record, is MySQL's work, not the
receiver's), and ``finish`` once its record is written, which frees its job for its
next callback.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from services.notifier.host_limits import HostLimits
from services.notifier.pending import PendingCallback
from services.notifier.posting import PostOutcome
from services.notifier.shares import DeliveryShares

# Answers that say the receiver is struggling, besides no answer at all.
STRUGGLING = frozenset({408, 429})


def failed_for_host(outcome: PostOutcome) -> bool:
    """Whether an answer counts against its host's limit: no answer, 408, 429 or 5xx.
    A 4xx is the callback's own problem, not the host's load."""
    code = outcome.status_code
    if outcome.refused:
        return False
    return code is None or code in STRUGGLING or code >= 500


@dataclass(frozen=True)
class HostView:
    """One receiving host as this notifier sees it now."""

    host: str
    in_flight: int
    limit: int
    latency_ms: int | None
    attempts: int
    failures: int


class AttemptScheduler:
    """Counts attempts in flight by app, host and job; safe from any thread.

    ``slots`` attempts run at once at most (the notifier's concurrency); each takes its
    app's and its host's shares (``DeliveryShares``) and a place under its host's
    adaptive limit (``HostLimits``); a job has one attempt going at a time, so two of
    its callbacks are never posted at once by this notifier (across notifiers and
    retry tiers, the deliverer parks a callback while an earlier run's is on its way).
    """

    def __init__(self, slots: int, shares: DeliveryShares, limits: HostLimits) -> None:
        self._slots = slots
        self._shares = shares
        self._limits = limits
        self._lock = threading.Lock()
        self._total = 0
        self._apps: Counter[int] = Counter()
        self._hosts: Counter[str] = Counter()
        self._jobs: set[int] = set()

    @property
    def free(self) -> int:
        """Attempts that may still start, shares allowing."""
        return self._slots - self._total

    def app_in_flight(self, app_pk: int) -> int:
        """The app's attempts going now."""
        return self._apps[app_pk]

    def host_in_flight(self, host: str) -> int:
        """The host's attempts going now."""
        return self._hosts[host]

    def job_in_flight(self, job_id: int | None) -> bool:
        """Whether one of the job's callbacks is being attempted now."""
        return job_id is not None and job_id in self._jobs

    def try_start(self, unit: PendingCallback) -> bool:
        """Count the unit's attempt as started if its app, host and job allow; False
        if it must wait."""
        host = unit.hosts.domain
        with self._lock:
            if self._total >= self._slots or self.job_in_flight(unit.job_id):
                return False
            if self._hosts[host] >= self._limits.limit_of(host):
                return False
            if not self._shares.take(unit.app_pk, unit.hosts):
                return False
            self._total += 1
            self._apps[unit.app_pk] += 1
            self._hosts[host] += 1
            if unit.job_id is not None:
                self._jobs.add(unit.job_id)
            return True

    def posted(self, unit: PendingCallback) -> None:
        """The POST of the unit's attempt, counted by ``try_start``, ended: its slot and
        its app's and host's shares are free; its job stays taken until ``finish``."""
        with self._lock:
            self._give_back(unit)

    def finish(self, unit: PendingCallback, posted: bool = False) -> None:
        """The unit's attempt ended (or never began): whatever it still holds is free,
        its job only when it was ``posted`` already."""
        with self._lock:
            if not posted:
                self._give_back(unit)
            if unit.job_id is not None:
                self._jobs.discard(unit.job_id)

    def _give_back(self, unit: PendingCallback) -> None:
        host = unit.hosts.domain
        self._shares.give_back(unit.app_pk, unit.hosts)
        self._total -= 1
        self._apps[unit.app_pk] -= 1
        self._hosts[host] -= 1
        if self._apps[unit.app_pk] <= 0:
            del self._apps[unit.app_pk]
        if self._hosts[host] <= 0:
            del self._hosts[host]

    def observe(self, unit: PendingCallback, seconds: float, outcome: PostOutcome) -> None:
        """The unit's POST took ``seconds`` and ended so: its host's limit follows."""
        with self._lock:
            self._limits.record(unit.hosts.domain, seconds, failed_for_host(outcome))

    def apps_in_flight(self) -> dict[int, int]:
        """Attempts going now, by app."""
        with self._lock:
            return dict(self._apps)

    def hosts(self, waiting: set[str]) -> list[HostView]:
        """Every host with attempts going, a standing, or in ``waiting``."""
        with self._lock:
            self._limits.forget_idle(set(self._hosts) | waiting)
            names = set(self._hosts) | set(self._limits.hosts()) | waiting
            return [self._view(host) for host in sorted(names)]

    def _view(self, host: str) -> HostView:
        standing = self._limits.standing(host)
        latency = standing.latency_s if standing is not None else None
        return HostView(
            host,
            self._hosts[host],
            self._limits.limit_of(host),
            round(latency * 1000) if latency is not None else None,
            standing.attempts if standing is not None else 0,
            standing.failures if standing is not None else 0,
        )
