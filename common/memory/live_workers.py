"""Workers in memory: the worker directory's twin for unit tests of routing.

``MemoryWorkers`` keeps the contract of ``common.loadbalance.LiveWorkers`` as the
dispatcher's ``WorkerDirectory`` does on MySQL and RabbitMQ: a worker is live when its
last heartbeat is fresh on the given clock, it said ACTIVE, and a consumer is on its
queue; its load is what its heartbeat reported plus what the store has QUEUED on it.
``tests/contracts/live_workers.py`` runs one test class against both. Every worker
reports no run time and an idle CPU, so the load score is its active count alone.

What it leaves out: the real directory's cache (it answers afresh on every call, so
picks of an earlier call are counted only through the store's QUEUED rows), queue
depths, queue deletion and the gauges.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from common.clock import Clock
from common.loadbalance import WorkerLoad
from common.memory.store import MemoryStore
from common.states import ExecutionStatus, WorkerState


@dataclass
class MemoryWorker:
    """A workers row as the last heartbeat left it, and whether its queue is consumed."""

    worker_id: str
    handlers: frozenset[str]
    last_heartbeat: int
    active: int = 0
    state: WorkerState = WorkerState.ACTIVE
    consuming: bool = False


class MemoryWorkers:
    """``LiveWorkers`` over heartbeats and consumers a test sets, on its clock."""

    def __init__(self, clock: Clock, stale_ms: int, store: MemoryStore | None = None) -> None:
        self._clock = clock
        self._stale_ms = stale_ms
        self._store = store
        self.workers: dict[str, MemoryWorker] = {}

    def heartbeat(
        self,
        worker_id: str,
        handlers: frozenset[str] | set[str],
        *,
        active: int = 0,
        state: WorkerState = WorkerState.ACTIVE,
        at_ms: int | None = None,
    ) -> None:
        """Record a heartbeat (now, unless ``at_ms``), as the worker's own would; whether
        its queue is consumed stays as it was (not, for a new worker)."""
        at = self._clock.now_ms() if at_ms is None else at_ms
        known = self.workers.get(worker_id)
        consuming = known is not None and known.consuming
        self.workers[worker_id] = MemoryWorker(
            worker_id, frozenset(handlers), at, active, state, consuming
        )

    def set_consuming(self, worker_id: str, consuming: bool = True) -> None:
        """A consumer comes onto (or, with False, goes off) the worker's queue."""
        self.workers[worker_id].consuming = consuming

    def start(self, worker_id: str, handlers: frozenset[str] | set[str], active: int = 0) -> None:
        """A worker comes up: an ACTIVE heartbeat now, and a consumer on its queue."""
        self.heartbeat(worker_id, handlers, active=active)
        self.set_consuming(worker_id)

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        """Live workers by id, with their load: reported plus QUEUED on them in the store."""
        heard_since = self._clock.now_ms() - self._stale_ms
        inflight = self._inflight()
        return [
            WorkerLoad(w.worker_id, w.active + inflight[w.worker_id], 0.0, 100.0, w.handlers)
            for w in sorted(self.workers.values(), key=lambda w: w.worker_id)
            if w.state is WorkerState.ACTIVE and w.last_heartbeat >= heard_since and w.consuming
        ]

    def _inflight(self) -> Counter[str | None]:
        if self._store is None:
            return Counter()
        queued = ExecutionStatus.QUEUED
        return Counter(r.worker_id for r in self._store.executions.values() if r.status is queued)
