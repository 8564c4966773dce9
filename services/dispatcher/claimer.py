"""Claiming due triggers: scan, plan by misfire policy, version CAS, create executions."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import ClaimUpdate, DueJob, claim_jobs, find_due_jobs
from common.db.retry import retry_lock_conflicts
from common.metrics import observe_claim
from common.schedule import TriggerPlan, plan_trigger
from common.states import ExecutionStatus, JobStatus

log = logging.getLogger(__name__)


def claim_update(plan: TriggerPlan) -> ClaimUpdate:
    """What claiming a trigger with this plan does to its job."""
    if plan.next_trigger is None and not plan.run:
        return ClaimUpdate(None, JobStatus.FAILED)
    status = JobStatus.RUNNING if plan.hold else JobStatus.WAITING
    return ClaimUpdate(plan.next_trigger, status)


def trigger_execution(job: DueJob, plan: TriggerPlan) -> NewExecution:
    """The execution row a claimed trigger becomes: SCHEDULED, or SKIPPED with its reason."""
    if plan.run:
        return NewExecution(str(uuid.uuid4()), job.id, 1, job.trigger_time, plan.fire_at)
    return NewExecution(
        str(uuid.uuid4()),
        job.id,
        1,
        job.trigger_time,
        plan.fire_at,
        status=ExecutionStatus.SKIPPED,
        message=plan.reason,
    )


class TriggerClaimer:
    """Claims the triggers due within a window ahead, so each can fire at its own time.

    A claimed trigger is a SCHEDULED execution row committed with the job's move to its
    next trigger; whichever dispatcher leads later fires it, so it is never lost.
    """

    def __init__(self, engine: Engine, clock: ClusterClock, batch_size: int, window_ms: int):
        self._engine = engine
        self._clock = clock
        self._batch_size = batch_size
        self._window_ms = window_ms

    @retry_lock_conflicts
    def claim(self, handlers: Iterable[str]) -> int:
        """Claim one batch; returns how many due jobs the scan found."""
        now = self._clock.now_ms()
        with self._engine.begin() as conn:
            due = find_due_jobs(conn, now + self._window_ms, handlers, self._batch_size)
            plans = {job.id: plan_trigger(job.policy, job.trigger_time, now) for job in due}
            updates = {job_id: claim_update(plan) for job_id, plan in plans.items()}
            won = claim_jobs(conn, due, updates, now)
            created = [trigger_execution(j, plans[j.id]) for j in due if j.id in won]
            insert_executions(conn, created, now)
        skipped = [e for e in created if e.status is ExecutionStatus.SKIPPED]
        observe_claim(len(created), len(skipped))
        for execution in skipped:
            log.info(
                execution.message or "trigger skipped",
                extra={"job_id": execution.job_id, "execution_id": execution.execution_id},
            )
        return len(due)
