"""Operators' drains, as Redis keys a worker reads with its heartbeats (so they reach a
worker on any host).

- A drain request (the console's Drain): the worker finishes the runs it has, takes no
  more, and stops, as on SIGTERM. The worker takes it (GET and DEL); it lapses if no
  worker takes it.
- A standing drain (``kairos workers drain``, until ``kairos workers undrain``): the
  worker is routed nothing new, gives back what it holds unstarted (the leader moves
  its unstarted work to live workers), finishes its runs and stays up, so it may then
  be stopped.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.audit import AuditEntry, record_alone
from common.db.workers import WorkerTransactions
from common.documents import JsonObject
from common.errors import WorkerNotLiveError
from common.states import WorkerState
from common.worker_marks import WorkerMarks
from common.worker_views import WorkerView, worker_views

DRAIN_REQUEST_SECONDS = 600


class WorkerStores(Protocol):
    """The stores an operator's drain reaches (``Stores`` and the API's state have them)."""

    def workers(self) -> WorkerTransactions: ...

    def worker_marks(self) -> WorkerMarks: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def clock(self) -> ClusterClock: ...


def request_drain(
    stores: WorkerStores, worker_id: str, stale_ms: int, requested_by: str
) -> WorkerView:
    """Ask a live worker to drain; ``WorkerNotLiveError`` for one that is not running
    (unknown, stopped, forgotten, draining already or silent for longer than
    ``stale_ms``). Returns the worker as it was."""
    worker = _live_worker(stores, worker_id, stale_ms)
    _audit(stores, requested_by, "worker.stop", worker_id, {"drainAndStop": True})
    stores.worker_marks().request_stop(worker_id, requested_by, DRAIN_REQUEST_SECONDS)
    return worker


def _audit(
    stores: WorkerStores, actor: str, action: str, worker_id: str, after: JsonObject
) -> None:
    entry = AuditEntry(actor, action, "worker", worker_id, None, None, after)
    record_alone(stores.engine, entry, stores.clock.now_ms())


def _live_worker(stores: WorkerStores, worker_id: str, stale_ms: int) -> WorkerView:
    """The worker, if it is ACTIVE and heard from within ``stale_ms``; else
    ``WorkerNotLiveError`` saying why not."""
    with stores.workers().reading() as workers:
        found = {w.worker_id: w for w in worker_views(workers, stores.clock.now_ms(), stale_ms)}
    worker = found.get(worker_id)
    if worker is None:
        raise WorkerNotLiveError(worker_id, "no worker has that id")
    if worker.state is not WorkerState.ACTIVE:
        raise WorkerNotLiveError(worker_id, f"it is {worker.state.value}")
    if worker.stale:
        raise WorkerNotLiveError(
            worker_id, f"it has not sent a heartbeat for {worker.age_ms / 1000:.0f} s"
        )
    return worker


def set_drained(
    stores: WorkerStores, worker_id: str, stale_ms: int, requested_by: str
) -> WorkerView:
    """Drain a live worker until it is undrained (``WorkerNotLiveError`` for one that is
    not ACTIVE and fresh); it takes the drain with its next heartbeat. Returns the
    worker as it was."""
    worker = _live_worker(stores, worker_id, stale_ms)
    _audit(stores, requested_by, "worker.drain", worker_id, {"drained": True})
    stores.worker_marks().drain(worker_id, requested_by)
    return worker


def clear_drained(stores: WorkerStores, worker_id: str, actor: str) -> bool:
    """Undrain a worker: it takes work again with its next heartbeat. False when it was
    not drained (nothing is written then)."""
    marks = stores.worker_marks()
    if not marks.drained([worker_id]):
        return False
    _audit(stores, actor, "worker.undrain", worker_id, {"drained": False})
    return marks.undrain(worker_id)
