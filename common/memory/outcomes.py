"""The in-memory store as recording sees it: ``OutcomeStore``'s reads and writes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from common.db.apps import DEFAULT_POLICY, AppPolicy
from common.db.deliveries import UNSETTLED, JobLabel, NewDelivery
from common.db.executions import UNFINISHED, LockedExecution, Outcome
from common.db.jobs import TriggerSettings
from common.memory.rows import DUPLICATE_KEY, MemoryDelivery, MemoryJob, refused
from common.memory.tables import MemoryTables
from common.states import DeliveryStatus, ExecutionStatus, JobStatus


class OutcomeTables(MemoryTables):
    """``OutcomeStore`` in memory (``insert_executions`` is the tables' own)."""

    def lock_unfinished(self, refs: Mapping[str, int | None]) -> list[LockedExecution]:
        """Rows by key, then rows whose key was stale by execution id; the unfinished."""
        known = {key for key in refs.values() if key is not None}
        looked_up = {r.id for r in self._by_execution_id(e for e, k in refs.items() if k is None)}
        rows = [self.executions[k] for k in sorted(known | looked_up) if k in self.executions]
        found = {r.execution_id for r in rows}
        stale = [e for e, key in refs.items() if key is not None and e not in found]
        rows += self._by_execution_id(stale)
        return [r.locked() for r in rows if r.status in UNFINISHED]

    def trigger_settings(self, job_ids: Iterable[int]) -> dict[int, TriggerSettings]:
        """What recording needs of each job that exists."""
        parents = {a.job_id for j in self.jobs.values() for a in j.after}
        return {
            j.id: TriggerSettings(
                j.id,
                j.app_pk,
                j.status,
                j.recurring,
                j.next_trigger_time is not None,
                j.callback_url,
                min(j.max_retries, self._app_policy(j.app_pk).max_retries),
                j.retry_backoff_seconds,
                j.retry_backoff_max_seconds,
                self.apps[j.app_pk].app_id if j.app_pk in self.apps else "",
                j.id in parents,
                bool(j.after),
                j.created_at,
            )
            for j in (self.jobs.get(i) for i in sorted(set(job_ids)))
            if j is not None
        }

    def _app_policy(self, app_pk: int) -> AppPolicy:
        """The app's policy as the dispatcher reads it; the defaults for an app not here."""
        app = self.apps.get(app_pk)
        return DEFAULT_POLICY if app is None else app.policy()

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> None:
        """Write final states over rows that exist (as ``lock_unfinished`` returned them)."""
        for o in outcomes:
            row = self.executions[o.execution.id]
            row.status = ExecutionStatus(o.status)
            row.worker_id = o.worker_id
            row.message = o.message
            row.result = o.result
            row.started_at = o.started_at
            row.ended_at = o.ended_at

    def release_jobs(self, ends: Iterable[tuple[int, JobStatus | None]], now_ms: int) -> None:
        """Move the jobs on as ``common.db.jobs.release_jobs`` does: one-shot jobs to
        their end, recurring ones back to WAITING, a job cancelled meanwhile as it is."""
        groups: dict[JobStatus | None, list[int]] = {}
        for job_id, final in ends:
            groups.setdefault(final, []).append(job_id)
        for final, job_ids in groups.items():
            for job in (self.jobs.get(i) for i in sorted(set(job_ids))):
                if job is not None:
                    _end_trigger(job, final, now_ms)

    def job_labels(self, job_ids: Iterable[int]) -> dict[int, JobLabel]:
        """The name and client request id of each job that exists."""
        found = (self.jobs.get(i) for i in set(job_ids))
        return {j.id: JobLabel(j.job_name, j.client_request_id) for j in found if j is not None}

    def jobs_with_callbacks_on_their_way(self, job_ids: Iterable[int]) -> set[int]:
        """Those of these jobs with a delivery PENDING, QUEUED or RETRYING."""
        wanted = set(job_ids)
        return {
            job_id
            for job_id, status in ((d.delivery.job_id, d.status) for d in self.deliveries)
            if job_id is not None and job_id in wanted and status in UNSETTLED
        }

    def insert_deliveries(
        self,
        rows: Sequence[NewDelivery],
        now_ms: int,
        status: DeliveryStatus = DeliveryStatus.PENDING,
    ) -> None:
        """Record deliveries ``status``: all, or none if a unique key refuses one."""
        ids = {d.delivery.delivery_id for d in self.deliveries}
        executions = {d.delivery.execution_id for d in self.deliveries}
        for r in rows:
            if r.delivery_id in ids or r.execution_id in executions:
                raise refused(DUPLICATE_KEY, f"Duplicate entry for delivery {r.delivery_id}")
            ids.add(r.delivery_id)
            executions.add(r.execution_id)
        for r in rows:
            self._next_delivery_pk += 1
            self.deliveries.append(
                MemoryDelivery(r, status, 0, now_ms, now_ms, pk=self._next_delivery_pk)
            )


def _end_trigger(job: MemoryJob, final: JobStatus | None, now_ms: int) -> None:
    """One job's part of ``end_triggers``: the row changes (version and time) in any case."""
    if final is not None and job.status in (JobStatus.RUNNING, JobStatus.PAUSED):
        job.status = final
    elif final is None and job.status is JobStatus.RUNNING:
        job.status = JobStatus.WAITING
    job.version += 1
    job.updated_at = now_ms
