"""The in-memory store as firing and sending see it: ``FireStore`` and ``DispatchStore``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from common.db.executions_with_job import SLOT_WAIT, ExecutionWithJob
from common.dependencies import HELD_FOR_PARENTS, ChildRun, Edge, ParentRun
from common.fair_share import AGING_MS, in_order
from common.memory.tables import MemoryTables
from common.states import ExecutionStatus


class FireTables(MemoryTables):
    """``FireStore`` (with ``DispatchStore``) in memory; ``release_jobs`` is recording's,
    ``app_policies`` and ``running_by_app`` the apps aggregate's (``AppTables``)."""

    def scheduled_until(
        self, until_ms: int, per_app: int, aging_ms: int = AGING_MS
    ) -> list[ExecutionWithJob]:
        """SCHEDULED executions due by ``until_ms``: each app's first ``per_app`` in its
        order, soonest first (then by key)."""
        parents = {a.job_id for j in self.jobs.values() for a in j.after}
        due = [
            r.with_job(self.jobs[r.job_id], r.job_id in parents)
            for r in self.executions.values()
            if r.status is ExecutionStatus.SCHEDULED
            and r.scheduled_at is not None
            and r.scheduled_at <= until_ms
        ]
        by_app: dict[int, list[ExecutionWithJob]] = {}
        for row in due:
            by_app.setdefault(row.app_pk, []).append(row)
        kept = [row for rows in by_app.values() for row in in_order(rows, aging_ms)[:per_app]]
        return sorted(kept, key=lambda r: (r.scheduled_at, r.id))

    def mark_waiting(self, keys: Sequence[int]) -> None:
        """Write ``SLOT_WAIT`` on these executions that are still SCHEDULED."""
        for key in keys:
            row = self.executions.get(key)
            if row is not None and row.status is ExecutionStatus.SCHEDULED:
                row.message = SLOT_WAIT

    def lock_still_scheduled(self, keys: Iterable[int], skip_locked: bool = False) -> set[int]:
        """The keys of these executions still SCHEDULED (no other transaction holds any)."""
        rows = (self.executions.get(k) for k in set(keys))
        return {r.id for r in rows if r is not None and r.status is ExecutionStatus.SCHEDULED}

    def jobs_with_runs(self, job_ids: Iterable[int]) -> set[int]:
        """Which of these jobs have an execution QUEUED."""
        wanted = set(job_ids)
        queued = ExecutionStatus.QUEUED
        return {r.job_id for r in self.executions.values() if r.status is queued} & wanted

    def jobs_with_own_runs(self, job_ids: Iterable[int]) -> set[int]:
        """Which of these jobs have a scheduled (not manual) execution not ended yet."""
        wanted = set(job_ids)
        unfinished = (ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED)
        own = (r for r in self.executions.values() if r.status in unfinished and not r.manual)
        return {r.job_id for r in own} & wanted

    def lock_free_jobs(self, job_ids: Iterable[int]) -> set[int]:
        """The ids of these jobs that exist (no other transaction holds any)."""
        return set(job_ids) & self.jobs.keys()

    def mark_skipped(
        self,
        reasons: Mapping[int, str],
        now_ms: int,
        status: ExecutionStatus = ExecutionStatus.SKIPPED,
    ) -> None:
        """End these executions with ``status`` and their reasons, whatever they were (the
        caller locked them SCHEDULED)."""
        for key, reason in reasons.items():
            row = self.executions.get(key)
            if row is not None:
                row.status, row.message, row.ended_at = status, reason, now_ms

    def hold_scheduled(self, reasons: Mapping[int, str], until_ms: int) -> None:
        """Move these executions' ``scheduled_at`` to ``until_ms``, with why in their message."""
        for key, reason in reasons.items():
            row = self.executions.get(key)
            if row is not None:
                row.scheduled_at, row.message = until_ms, reason

    # DispatchStore, and what the firer marks before it sends.

    def mark_queued(self, workers: Mapping[int, str], now_ms: int) -> None:
        """Mark these executions (key -> worker id) QUEUED, as ``executions.mark_queued``
        does: only those still SCHEDULED change."""
        for key, worker_id in workers.items():
            row = self.executions.get(key)
            if row is not None and row.status is ExecutionStatus.SCHEDULED:
                row.dispatched_at = now_ms
                row.worker_id = worker_id
                row.message = None
                row.status = ExecutionStatus.QUEUED

    def unmark_queued(self, keys: Iterable[int]) -> None:
        """Put these executions back to SCHEDULED, with no worker and no dispatch time."""
        for row in (self.executions.get(k) for k in sorted(set(keys))):
            if row is not None:
                row.status = ExecutionStatus.SCHEDULED
                row.worker_id = None
                row.dispatched_at = None

    def parents_of_runs(self, children: Sequence[ChildRun]) -> tuple[list[Edge], list[ParentRun]]:
        """The edges of these runs' jobs with their parents' state, and every scheduled
        run of those parents (a superset of what the MySQL store reads)."""
        edges: list[Edge] = []
        for child_id in sorted({c.job_id for c in children}):
            for after in self.jobs[child_id].after:
                parent = self.jobs[after.job_id]
                edges.append(
                    Edge(
                        child_id,
                        after.job_id,
                        after.on,
                        parent.deleted,
                        parent.recurring,
                        parent.status,
                        parent.next_trigger_time,
                    )
                )
        parents = {e.parent_job_id for e in edges}
        runs = [
            ParentRun(r.job_id, r.execution_id, r.trigger_time, r.attempt, r.status)
            for r in self.executions.values()
            if r.job_id in parents and not r.manual
        ]
        return edges, runs

    def record_waited_for(self, waited: Mapping[int, Sequence[ParentRun]]) -> None:
        """Write on each execution (by key) the parent runs it waited for."""
        for key, runs in waited.items():
            self.executions[key].waited_for = json.dumps([r.as_json() for r in runs])

    def wake_children(self, parent_job_ids: Sequence[int], now_ms: int) -> int:
        """Bring forward the SCHEDULED runs of these jobs' children held for later
        for their parents (``HELD_FOR_PARENTS``); how many moved."""
        parents = set(parent_job_ids)
        woken = 0
        for row in self.executions.values():
            after = {a.job_id for a in self.jobs[row.job_id].after}
            if (
                after & parents
                and row.status is ExecutionStatus.SCHEDULED
                and row.scheduled_at is not None
                and row.scheduled_at > now_ms
                and (row.message or "").startswith(HELD_FOR_PARENTS)
            ):
                row.scheduled_at = now_ms
                woken += 1
        return woken
