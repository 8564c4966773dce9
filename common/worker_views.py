"""Workers as operators see them: state, heartbeat age by the cluster clock, and the load
score the dispatcher computes, with its parts.

The CLI (``kairos workers``) and the console show the same figures from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.db.workers import WorkerRecord, WorkerStore
from common.loadbalance import WorkerLoad, load_score
from common.states import WorkerState


@dataclass(frozen=True)
class ScoreParts:
    """The equal-cost load score, term by term: lower is less loaded."""

    runs: float
    """(runs its heartbeat reports + executions QUEUED on it) x 10"""
    avg_run: float
    """its average run time in seconds (avg_ms / 1000)"""
    cpu: float
    """its CPU busy share / 10 ((100 - cpu_idle) / 10)"""

    @property
    def total(self) -> float:
        """The score itself."""
        return self.runs + self.avg_run + self.cpu


@dataclass(frozen=True)
class WorkerView:
    """One worker, read at ``now_ms`` on the cluster clock."""

    worker_id: str
    hostname: str
    pid: int
    state: WorkerState
    capacity: int
    active: int
    overrun: int
    queued: int
    cpu_idle: int
    avg_ms: int
    handlers: tuple[str, ...]
    age_ms: int
    stale: bool

    @property
    def takes_work(self) -> bool:
        """ACTIVE with a fresh heartbeat (the dispatcher also wants a consumer on its
        queue, which only the broker knows)."""
        return self.state is WorkerState.ACTIVE and not self.stale

    @property
    def score(self) -> ScoreParts:
        """The load score as the dispatcher computes it for this worker."""
        load = WorkerLoad(
            self.worker_id, self.active + self.queued, self.avg_ms, self.cpu_idle, frozenset()
        )
        return ScoreParts(load.active * 10, load.avg_ms / 1000, (100 - load.cpu_idle) / 10)

    @property
    def score_total(self) -> float:
        """The score the dispatcher's ``load_score`` gives this worker."""
        load = WorkerLoad(
            self.worker_id, self.active + self.queued, self.avg_ms, self.cpu_idle, frozenset()
        )
        return load_score(load)


def worker_views(store: WorkerStore, now_ms: int, stale_ms: int) -> list[WorkerView]:
    """Every worker, by id, with its heartbeat age and the executions QUEUED on it."""
    queued = store.queued_by_worker()
    return [_view(w, queued.get(w.worker_id, 0), now_ms, stale_ms) for w in store.all_workers()]


def _view(worker: WorkerRecord, queued: int, now_ms: int, stale_ms: int) -> WorkerView:
    age = max(0, now_ms - worker.last_heartbeat)
    state = worker.state
    return WorkerView(
        worker_id=worker.worker_id,
        hostname=worker.hostname,
        pid=worker.pid,
        state=state,
        capacity=worker.capacity,
        active=worker.active,
        overrun=worker.overrun,
        queued=queued,
        cpu_idle=worker.cpu_idle,
        avg_ms=worker.avg_ms,
        handlers=worker.handlers,
        age_ms=age,
        stale=age > stale_ms and state in (WorkerState.ACTIVE, WorkerState.DRAINING),
    )
