"""Slots: how many executions a worker's queue may hold, so that it holds only what the
worker can start soon.

A worker runs ``capacity`` executions at once. Whatever is sent beyond that waits in its
queue, first in, first out, where no other app's run can pass it. So the dispatcher sends
a worker no more than its capacity plus what it will start within ``horizon_ms``: from
its heartbeat's average run time (at least 1 ms), ``capacity * horizon / avg_ms``, plus
what it finishes within the time results take to be recorded (the in-flight count the
room is measured from holds those until then);
before its heartbeat has timed a run, its measured turnover (results per second, as the
dispatcher sees its in-flight count fall) times the horizon; while neither is known, the
pace of the slowest peer that has timed runs (so that a worker new to a burst takes its
share of it instead of leaving it all to the one that ran before); one more run per slot
when no worker has timed any.
Due work beyond that waits in Kairos, where the fair share decides who goes next.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

# What "soon" means: a run sent now starts within about this long.
HORIZON_MS = 1_000
# How much a new turnover figure weighs against what was measured before.
RATE_WEIGHT = 0.5
# The shortest span a turnover is measured over, and how much faster than the last
# figure one span may say a worker is: a report that comes late (a claim's sends are
# counted after its commit) must not read as a burst that floods its queue.
MEASURE_S = 0.1
GROWTH = 8.0
# How long a finished run's result may take to be recorded, which the turnover the
# leader measures lags by.
RESULTS_LAG_MS = 2_000
# No queue is bounded beyond this many executions: past it no measure is trusted.
MOST_QUEUED = 100_000


def queue_bound(
    capacity: int, avg_ms: float, rate_per_s: float, horizon_ms: int, results_lag_ms: float = 0
) -> int:
    """The most executions a worker's queue may hold (running ones included), as the
    in-flight count the leader measures it against: runs whose results are still on
    their way (``results_lag_ms``, as measured) count there too."""
    if avg_ms >= 1:
        # The worker's own measure of its runs: what its slots start within the horizon,
        # and what they finished within the lag that the in-flight count still holds.
        ahead = capacity * (horizon_ms + results_lag_ms) / avg_ms
    else:
        # No run timed yet: what it turned over. The in-flight count it is measured on
        # holds runs that ended but whose results are still on their way, so the queue
        # holds what the worker starts within the horizon once that lag is added.
        ahead = max(float(capacity), rate_per_s * (horizon_ms + RESULTS_LAG_MS) / 1000)
    return min(MOST_QUEUED, capacity + math.ceil(ahead))


# How much a batch's lag weighs against the lag measured before.
LAG_WEIGHT = 0.3


@dataclass
class ResultsLag:
    """How long a finished run's result takes to be recorded (run end to the results
    consumer's write, cluster clock), as the leader's results consumer measures it.

    Averaged over recent batches and held to ``RESULTS_LAG_MS`` at most, the allowance
    made where nothing is measured: a results consumer that falls far behind must not
    let queues grow without end.
    """

    _ms: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, lags_ms: list[int]) -> None:
        """Take one recorded batch's lags (ms, one per result)."""
        if not lags_ms:
            return
        batch = min(float(RESULTS_LAG_MS), max(0.0, sum(lags_ms) / len(lags_ms)))
        with self._lock:
            self._ms = LAG_WEIGHT * batch + (1 - LAG_WEIGHT) * self._ms

    def ms(self) -> float:
        """The lag now, in milliseconds."""
        with self._lock:
            return self._ms


@dataclass
class _Turnover:
    at_s: float
    inflight: int
    rate: float = 0.0
    # Sends counted before their rows showed in the in-flight count (a claim reports
    # its picks after its commit), owed to the next look; never below zero.
    owed: int = 0


@dataclass
class TurnoverMeter:
    """Each worker's turnover (executions finished per second), measured from its
    in-flight count between two looks and what was sent to it meanwhile."""

    horizon_ms: int = HORIZON_MS
    results_lag: ResultsLag = field(default_factory=ResultsLag)
    _seen: dict[str, _Turnover] = field(default_factory=dict)
    _sent: dict[str, int] = field(default_factory=dict)
    # The claim thread counts its sends too.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, worker_id: str, count: int = 1) -> None:
        """Count executions sent to a worker since its last look."""
        if count:
            with self._lock:
                self._sent[worker_id] = self._sent.get(worker_id, 0) + count

    def observe(self, worker_id: str, inflight: int, at_s: float) -> float:
        """Record the worker's in-flight count now; its turnover per second."""
        with self._lock:
            sent, self._sent[worker_id] = self._sent.get(worker_id, 0), 0
        last = self._seen.get(worker_id)
        if last is None:
            self._seen[worker_id] = _Turnover(at_s, inflight)
            return 0.0
        if at_s - last.at_s < MEASURE_S:
            # Too short a span to measure: its sends count at the next look.
            self._sent[worker_id] = self._sent.get(worker_id, 0) + sent
            return last.rate
        # What left the worker's count since the last look, given what was sent to it;
        # a count that ran ahead of the sends reported is owed, not lost, so that one
        # late report cannot read as a burst of finished runs.
        finished = last.inflight + sent - inflight - last.owed
        owed = max(0, -finished)
        finished = max(0, finished)
        rate = last.rate
        if finished or last.inflight + sent:  # an idle worker says nothing of its speed
            measured = finished / (at_s - last.at_s)
            if last.rate:
                measured = min(measured, GROWTH * last.rate)
                rate = RATE_WEIGHT * measured + (1 - RATE_WEIGHT) * last.rate
            else:
                rate = measured
        self._seen[worker_id] = _Turnover(at_s, inflight, rate, owed)
        return rate

    def bound(self, worker_id: str, capacity: int, avg_ms: float, peers_ms: float = 0) -> int:
        """The worker's queue bound from what is measured of it, or of its peers
        (``peers_ms``, from ``peer_pace_ms``) when nothing is measured of it yet."""
        seen = self._seen.get(worker_id)
        rate = seen.rate if seen else 0.0
        if avg_ms < 1 and not rate:
            avg_ms = peers_ms
        return queue_bound(capacity, avg_ms, rate, self.horizon_ms, self.results_lag.ms())


def peer_pace_ms(avgs_ms: Iterable[float]) -> float:
    """The average run time a worker that has timed no run is bounded by: the slowest
    among its peers' that have timed runs, 0 when none has.

    The slowest, not the mean: a new worker's runs may be its peers' slow ones, and a
    queue sized by too slow a pace costs only a refill, not another app's turn.
    """
    return max((avg for avg in avgs_ms if avg >= 1), default=0.0)
