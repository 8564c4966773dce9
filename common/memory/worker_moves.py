"""Moving what is QUEUED on a worker, in memory: the twin of ``common.db.worker_moves``
(and of ``unfinished_on_worker``), the part of ``RescueStore`` that is not sending's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from common.db.executions_with_job import ExecutionWithJob
from common.memory.rows import MemoryExecution
from common.memory.workers import WorkerTables
from common.states import ExecutionStatus


class MoveTables(WorkerTables):
    """``RescueStore`` in memory (``unmark_queued`` is firing's)."""

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

    def newest_queued_on(self, worker_id: str, limit: int) -> list[ExecutionWithJob]:
        """Executions QUEUED on the worker, the last sent first, up to ``limit``."""
        rows = sorted(
            self._queued_on(worker_id), key=lambda r: (r.dispatched_at or 0, r.id), reverse=True
        )
        return [r.with_job(self.jobs[r.job_id]) for r in rows[:limit]]

    def recall(self, execution_ids: Sequence[str], from_worker: str, message: str) -> int:
        """Give executions QUEUED on ``from_worker`` back to the firer: SCHEDULED, their
        due time and ``dispatched_at`` kept, with why; how many were still there."""
        recalled = 0
        for execution_id in set(execution_ids):
            row = self._queued_row(execution_id, from_worker)
            if row is not None:
                row.status, row.worker_id, row.message = ExecutionStatus.SCHEDULED, None, message
                recalled += 1
        return recalled

    def _queued_row(self, execution_id: str, worker_id: str) -> MemoryExecution | None:
        found = self._by_execution_id([execution_id])
        if found and found[0].worker_id == worker_id and found[0].status is ExecutionStatus.QUEUED:
            return found[0]
        return None
