"""The workers aggregate in memory: ``WorkerStore``'s twin (``common.db.workers``) over
the in-memory workers table and the executions QUEUED on each worker."""

from __future__ import annotations

import dataclasses
from collections import Counter

from common.db.workers import Heartbeat, WorkerRecord
from common.memory.rows import MemoryExecution
from common.memory.tables import MemoryTables
from common.states import ExecutionStatus, WorkerState


class WorkerTables(MemoryTables):
    """``WorkerStore`` in memory."""

    def upsert_heartbeat(self, heartbeat: Heartbeat) -> None:
        """Insert or refresh the worker's row with all it says of itself."""
        h = heartbeat
        self.workers[h.worker_id] = WorkerRecord(
            h.worker_id,
            h.hostname,
            h.pid,
            h.capacity,
            h.active,
            h.cpu_idle,
            h.avg_ms,
            tuple(h.handlers),
            h.state,
            h.started_at,
            h.sent_at,
            h.overrun,
            {name: max(1, ms) for name, ms in h.handler_ms.items()},
        )

    def fresh_workers(self, heard_since_ms: int) -> list[WorkerRecord]:
        """ACTIVE workers heard since the cut-off, by id."""
        return self._heard_since(WorkerState.ACTIVE, heard_since_ms)

    def draining_workers(self, heard_since_ms: int) -> list[WorkerRecord]:
        """DRAINING workers heard since the cut-off, by id."""
        return self._heard_since(WorkerState.DRAINING, heard_since_ms)

    def _heard_since(self, state: WorkerState, heard_since_ms: int) -> list[WorkerRecord]:
        return [
            w
            for _, w in sorted(self.workers.items())
            if w.state is state and w.last_heartbeat >= heard_since_ms
        ]

    def gone_workers(self, heard_before_ms: int) -> list[WorkerRecord]:
        """Workers that said they stopped or were last heard before the cut-off, not
        forgotten; longest gone first."""
        gone = [
            w
            for w in self.workers.values()
            if (w.state is WorkerState.STOPPED or w.last_heartbeat < heard_before_ms)
            and w.state is not WorkerState.FORGOTTEN
        ]
        return sorted(gone, key=lambda w: (w.last_heartbeat, w.worker_id))

    def forget_worker_unless_held(self, worker_id: str, heard_before_ms: int) -> bool:
        """Mark the worker FORGOTTEN if it was last heard before the cut-off and nothing is
        QUEUED on it (no other transaction ever holds its row here)."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.state is WorkerState.FORGOTTEN:
            return False
        if worker.last_heartbeat >= heard_before_ms or self._queued_on(worker_id):
            return False
        self.workers[worker_id] = dataclasses.replace(worker, state=WorkerState.FORGOTTEN)
        return True

    def all_workers(self) -> list[WorkerRecord]:
        """Every worker row, by id."""
        return [w for _, w in sorted(self.workers.items())]

    def registered_handlers(self) -> set[str]:
        """Every handler name any worker has registered."""
        return {name for w in self.workers.values() for name in w.handlers}

    def queued_by_worker(self) -> dict[str, int]:
        """How many executions are QUEUED on each worker."""
        queued = ExecutionStatus.QUEUED
        counts = Counter(str(r.worker_id) for r in self.executions.values() if r.status is queued)
        return dict(counts)

    def prune_forgotten(self, before_ms: int, limit: int) -> list[str]:
        """Delete up to ``limit`` forgotten workers last heard before ``before_ms``, by
        id; their ids."""
        gone = [
            worker_id
            for worker_id, w in sorted(self.workers.items())
            if w.state is WorkerState.FORGOTTEN and w.last_heartbeat < before_ms
        ][:limit]
        for worker_id in gone:
            del self.workers[worker_id]
        return gone

    def _queued_on(self, worker_id: str) -> list[MemoryExecution]:
        """The executions QUEUED on the worker, by key."""
        queued = ExecutionStatus.QUEUED
        return [
            r
            for _, r in sorted(self.executions.items())
            if r.worker_id == worker_id and r.status is queued
        ]
