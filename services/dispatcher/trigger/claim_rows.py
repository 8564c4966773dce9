"""The executions a claim wrote SCHEDULED, as the firer holds them, built from what the
claim already has in hand (the due job, the new row, the claim's update of the job).

Read back from MySQL instead, the firer would parse every column of every row a claim
just wrote: under a backlog that cost as much of the leader's time as the claim itself
(bench/RESULTS.md). The store stays the truth: the firer locks each row SCHEDULED before
it sends it, and a load replaces what it holds with what MySQL says.
"""

from __future__ import annotations

from common.db.due_jobs import ClaimUpdate, DueJob
from common.db.executions_with_job import ExecutionWithJob
from common.states import ExecutionStatus
from services.dispatcher.trigger.claim_handover import Written


def held_row(written: Written, job: DueJob, update: ClaimUpdate) -> ExecutionWithJob:
    """The row ``executions_with_job`` would read for ``written`` once the claim committed."""
    row, policy = written.row, job.policy
    assert row.status is ExecutionStatus.SCHEDULED
    return ExecutionWithJob(
        id=written.key,
        execution_id=row.execution_id,
        job_id=row.job_id,
        attempt=row.attempt,
        trigger_time=row.trigger_time,
        scheduled_at=row.scheduled_at,
        worker_id=None,
        status=ExecutionStatus.SCHEDULED,
        manual=row.manual,
        handler=job.handler,
        params=job.params,
        timeout_seconds=job.timeout_seconds,
        overlap_policy=policy.overlap.value,
        misfire_policy=policy.misfire.value,
        misfire_threshold_seconds=policy.misfire_threshold_ms // 1000,
        next_trigger_time=update.next_trigger_time,
        job_status=update.status,
        recurring=policy.schedule.recurring,
        dispatched_at=None,
        app_pk=job.app_pk,
        priority=job.priority,
        waited=False,
        traceparent=row.traceparent,
        has_dependencies=job.has_dependencies,
        has_children=job.has_children,
        job_created_at=job.created_at,
    )
