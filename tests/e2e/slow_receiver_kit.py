"""The pieces of the slow-receiver scenario (issue 31): receivers that note when each
callback arrives, one of them answering slowly; jobs of one app calling back to it and
of another app calling back to a fast one; and each callback's lag, from the end of its
run to its arrival.

``tests/e2e/test_callback_isolation.py`` and ``bench/slow_receiver.py`` both drive it,
so the test and the figures measure the same thing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from common.timefmt import parse_instant
from tests.e2e.fair_share_kit import Tenant, submit_batches
from tests.e2e.local_receiver import LocalReceiver

NOOP_HANDLER = "demo.noop"


@dataclass(frozen=True)
class Arrival:
    """One callback as a receiver got it: its job, when its run ended (cluster-clock
    epoch ms, from the payload) and when it arrived (this machine's epoch ms)."""

    job_id: int
    delivery_id: str
    ended_ms: int
    arrived_ms: int

    @property
    def lag_ms(self) -> int:
        """Callback lag: from the end of the run to the callback's arrival."""
        return self.arrived_ms - self.ended_ms


class TimedReceiver:
    """A local receiver answering 204 after ``delay_seconds``, noting each arrival when
    its request is read (before the delay)."""

    def __init__(self, delay_seconds: float = 0.0) -> None:
        self.arrivals: list[Arrival] = []
        self._lock = threading.Lock()
        self._server = LocalReceiver(self.note, delay_seconds)
        self.url = self._server.url

    def note(self, body: bytes, delivery_id: str) -> None:
        """Record one arrival, now."""
        arrived_ms = int(time.time() * 1000)
        data = json.loads(body)["data"]
        arrival = Arrival(
            int(data["jobId"]), delivery_id, parse_instant(data["endedAt"]), arrived_ms
        )
        with self._lock:
            self.arrivals.append(arrival)

    def jobs_arrived(self) -> set[int]:
        """The jobs whose callback arrived at least once."""
        with self._lock:
            return {a.job_id for a in self.arrivals}

    def first_arrivals(self) -> list[Arrival]:
        """Each job's first arrival."""
        with self._lock:
            found: dict[int, Arrival] = {}
            for arrival in self.arrivals:
                found.setdefault(arrival.job_id, arrival)
            return list(found.values())

    def close(self) -> None:
        """Stop serving."""
        self._server.close()


def callback_bodies(prefix: str, count: int, url: str) -> list[dict[str, Any]]:
    """``count`` one-shot no-op jobs due now, each calling back to ``url``."""
    return [
        {"jobName": f"{prefix} {n}", "jobHandler": NOOP_HANDLER, "callbackUrl": url}
        for n in range(count)
    ]


def submit_callback_jobs(tenant: Tenant, count: int, url: str) -> list[int]:
    """Submit the jobs through the batch API; their ids."""
    return submit_batches(tenant, callback_bodies(tenant.name, count, url))


def lags_ms(arrivals: Sequence[Arrival]) -> list[int]:
    """The arrivals' lags, sorted."""
    return sorted(a.lag_ms for a in arrivals)
