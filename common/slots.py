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

That bound counts places, each standing for the worker's average run time. A run of a
slower handler takes as many places as its own time holds (``run_cost``: the worker's
time for that handler, else the slowest peer's; a handler nobody has timed fills the
horizon), and keeps them until it leaves the queue (``SlowRuns``). A handler's time
is the longer of its runs' mean (its latest runs', once those outgrow the mean over
minutes) and how long its runs going have gone (their median), sent as soon as they
outgrow it (``services.worker.heartbeat``), so runs of a handler grown slow are priced
as slow before they end. So a flood of slow runs after a stretch of quick ones queues
what starts within the horizon, not tens of thousands of runs that would hold every
other app's for minutes.
Due work beyond that waits in Kairos, where the fair share decides who goes next.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
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
        """Count executions sent to a worker since its last look (negative: taken back
        from its queue unstarted, which its in-flight count no longer holds)."""
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

    def unit_ms(self, worker_id: str, avg_ms: float, peers_ms: float = 0) -> float:
        """The run time one place in the worker's queue stands for: its own average,
        else its peers' pace (``peer_pace_ms``) while nothing is measured of it; 0 when
        its bound is not counted in run time (only its turnover, or nothing, is known)."""
        if avg_ms >= 1:
            return avg_ms
        seen = self._seen.get(worker_id)
        return 0.0 if seen is not None and seen.rate else peers_ms

    def bound(self, worker_id: str, capacity: int, avg_ms: float, peers_ms: float = 0) -> int:
        """The worker's queue bound from what is measured of it, or of its peers
        (``peers_ms``, from ``peer_pace_ms``) when nothing is measured of it yet."""
        seen = self._seen.get(worker_id)
        rate = seen.rate if seen else 0.0
        unit = self.unit_ms(worker_id, avg_ms, peers_ms)
        return queue_bound(capacity, unit, rate, self.horizon_ms, self.results_lag.ms())


def peer_pace_ms(avgs_ms: Iterable[float]) -> float:
    """The average run time a worker that has timed no run is bounded by: the slowest
    among its peers' that have timed runs, 0 when none has.

    The slowest, not the mean: a new worker's runs may be its peers' slow ones, and a
    queue sized by too slow a pace costs only a refill, not another app's turn.
    """
    return max((avg for avg in avgs_ms if avg >= 1), default=0.0)


def run_cost(pace_ms: float | None, unit_ms: float, horizon_ms: int) -> int:
    """How many places in a worker's queue one run takes: its handler's run time
    (``pace_ms``) over the time a place stands for (``unit_ms``), at least one.

    A handler nobody has timed is taken to fill the whole horizon: a flood of runs of
    unknown length must not fill a queue sized by quick ones. Where the bound is not
    counted in run time (``unit_ms`` 0), every run takes one place.
    """
    if unit_ms < 1:
        return 1
    pace = float(horizon_ms) if pace_ms is None else pace_ms
    return max(1, math.ceil(pace / unit_ms))


def handler_paces(workers_ms: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Each handler's run time as the slowest worker that timed it says (ms)."""
    paces: dict[str, int] = {}
    for timed in workers_ms:
        for handler, ms in timed.items():
            paces[handler] = max(ms, paces.get(handler, 0))
    return paces


# Runs left to settle below this are rounding, not runs.
SETTLED = 1e-6


@dataclass
class _Held:
    # (runs, ms beyond a place each) per batch of sends, oldest first.
    sends: deque[list[float]] = field(default_factory=deque)
    runs: float = 0.0
    extra_ms: float = 0.0


@dataclass
class SlowRuns:
    """The time that runs sent to each worker take beyond the one place each is counted
    as in its in-flight count, held until they leave its queue.

    The leader sees a run leave only as the worker's in-flight count falling. A queue
    is first in, first out, so the runs gone are the oldest sent: each look drops the
    oldest sends beyond the count (``settle``), and what is left is still held.
    """

    _held: dict[str, _Held] = field(default_factory=dict)
    # The dispatch loop reports its sends, the claim thread its own.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, worker_id: str, runs: int, extra_ms: float) -> None:
        """Count ``runs`` sent to the worker, taking ``extra_ms`` beyond a place each."""
        if runs <= 0:
            return
        with self._lock:
            held = self._held.setdefault(worker_id, _Held())
            held.sends.append([float(runs), extra_ms])
            held.runs += runs
            held.extra_ms += extra_ms

    def settle(self, worker_id: str, inflight: int) -> float:
        """Drop what left the worker's queue, given its in-flight count now; the time
        beyond a place each that what is still there takes (ms)."""
        with self._lock:
            held = self._held.get(worker_id)
            if held is None:
                return 0.0
            gone = held.runs - inflight
            # Parts of sends leave float remainders: one too small to take a part of
            # (gone / runs rounds to 0) would loop for good.
            while gone > SETTLED and held.sends:
                runs, extra = held.sends[0]
                part = 1.0 if runs <= gone else gone / runs
                held.sends[0] = [runs * (1 - part), extra * (1 - part)]
                held.runs -= runs * part
                held.extra_ms -= extra * part
                gone -= runs * part
                if part >= 1.0:
                    held.sends.popleft()
            if not held.sends:
                del self._held[worker_id]
                return 0.0
            return max(0.0, held.extra_ms)

    def reprice(self, worker_id: str, runs: int, extra_ms: float) -> None:
        """Hold what the worker's queue holds as counted now: ``runs`` runs taking
        ``extra_ms`` beyond a place each, at today's prices (a handler grown slow, or a
        leader that has just taken over and counted nothing yet; ``upkeep.recall``)."""
        with self._lock:
            if runs <= 0:
                self._held.pop(worker_id, None)
                return
            held = _Held(deque([[float(runs), extra_ms]]), float(runs), extra_ms)
            self._held[worker_id] = held

    def forget_except(self, worker_ids: Iterable[str]) -> None:
        """Forget the workers not among ``worker_ids`` (gone: their runs are moved or
        rescued, and sent anew elsewhere)."""
        keep = set(worker_ids)
        with self._lock:
            for worker_id in [w for w in self._held if w not in keep]:
                del self._held[worker_id]
