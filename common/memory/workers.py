"""The in-memory store as the rescue sees it: the workers table, and the executions
QUEUED on a worker (``RescueStore``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from common.db.executions_with_job import ExecutionWithJob
from common.db.workers import Heartbeat, WorkerRecord
from common.memory.rows import MemoryExecution
from common.memory.tables import MemoryTables
from common.states import ExecutionStatus, WorkerState


class WorkerTables(MemoryTables):
    """``RescueStore`` in memory (``unmark_queued`` is firing's), and heartbeats."""

    def upsert_heartbeat(self, heartbeat: Heartbeat) -> None:
        """Insert or refresh the worker's row, as ``workers.upsert_heartbeat`` does."""
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
        )

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

    def draining_workers(self, heard_since_ms: int) -> list[WorkerRecord]:
        """DRAINING workers heard since the cut-off, by id."""
        draining = WorkerState.DRAINING
        return [
            w
            for _, w in sorted(self.workers.items())
            if w.state is draining and w.last_heartbeat >= heard_since_ms
        ]

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

    def unfinished_on_worker(self, worker_id: str, limit: int) -> list[ExecutionWithJob]:
        """Executions QUEUED on the worker, with their job's data, by key, up to ``limit``."""
        rows = self._queued_on(worker_id)[:limit]
        return [r.with_job(self.jobs[r.job_id]) for r in rows]

    def lock_queued_on(self, execution_ids: Iterable[str], worker_id: str) -> set[str]:
        """The ids of these executions still QUEUED on the worker (none is ever held)."""
        wanted = set(execution_ids)
        return {r.execution_id for r in self._queued_on(worker_id) if r.execution_id in wanted}

    def reassign(self, execution_id: str, from_worker: str, to_worker: str, now_ms: int) -> bool:
        """Point an execution QUEUED on ``from_worker`` at ``to_worker``, dispatched now;
        False if it is no longer QUEUED there."""
        row = self._queued_row(execution_id, from_worker)
        if row is None:
            return False
        row.worker_id, row.dispatched_at = to_worker, now_ms
        return True

    def unassign(self, execution_id: str, from_worker: str, message: str, now_ms: int) -> bool:
        """Give an execution QUEUED on ``from_worker`` back to the firer: SCHEDULED, due
        now, with why; False if it is no longer QUEUED there."""
        row = self._queued_row(execution_id, from_worker)
        if row is None:
            return False
        row.status, row.worker_id, row.dispatched_at = ExecutionStatus.SCHEDULED, None, None
        row.scheduled_at, row.message = now_ms, message
        return True

    def _queued_on(self, worker_id: str) -> list[MemoryExecution]:
        queued = ExecutionStatus.QUEUED
        return [
            r
            for _, r in sorted(self.executions.items())
            if r.worker_id == worker_id and r.status is queued
        ]

    def _queued_row(self, execution_id: str, worker_id: str) -> MemoryExecution | None:
        found = self._by_execution_id([execution_id])
        if found and found[0].worker_id == worker_id and found[0].status is ExecutionStatus.QUEUED:
            return found[0]
        return None
