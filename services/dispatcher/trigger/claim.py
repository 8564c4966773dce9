"""Claiming due triggers: scan, plan by misfire policy, version CAS, create executions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from common.alerts.rules import RuleSource
from common.clock import ClusterClock
from common.db.due_jobs import ClaimUpdate, DueJob, claim_jobs, find_due_jobs
from common.db.executions import NewExecution, triggers_with_executions
from common.db.retry import is_duplicate_key, retry_conflicts
from common.execution_ids import trigger_execution_id as derived_id
from common.jitter import jitter_offset_ms
from common.metrics import observe_claim
from common.schedule import TriggerPlan, plan_trigger
from common.states import ExecutionStatus, JobStatus
from common.store_errors import is_store_outage
from common.tracing.spans import NO_TRACING, Tracing, branch
from services.dispatcher.outcomes.callbacks import record_claim_failures
from services.dispatcher.trigger.claim_handover import ClaimSender, OpenClaim
from services.dispatcher.trigger.claim_rows import held_row

log = logging.getLogger(__name__)

# Triggers due longer ago than this are a backlog, claimed after the ones on time.
ON_TIME_MS = 5_000
# After a look at the backlog that found nothing, the next look waits this long: jobs
# due long ago whose handler no live worker runs stay in the backlog's index range, and
# every look walks past them, which the on-time scan never does. A trigger that turns
# late meanwhile waits this much more.
BACKLOG_IDLE_MS = 1_000


def claim_update(plan: TriggerPlan | Unplannable) -> ClaimUpdate:
    """What claiming a trigger with this plan does to its job."""
    if isinstance(plan, Unplannable):
        return ClaimUpdate(None, JobStatus.FAILED)
    if plan.next_trigger is None and not plan.run:
        return ClaimUpdate(None, JobStatus.FAILED)
    # A last run (a one-shot job's, or a cron's past its last time) holds its job: the
    # job ends with that run's outcome.
    last = plan.next_trigger is None
    status = JobStatus.RUNNING if plan.hold or last else JobStatus.WAITING
    return ClaimUpdate(plan.next_trigger, status)


def trigger_execution_id(job: DueJob) -> str:
    """The execution id of a job's first attempt at its current trigger (see
    ``common.execution_ids``)."""
    return derived_id(job.id, job.created_at, job.trigger_time)


@dataclass(frozen=True)
class Unplannable:
    """A trigger whose plan could not be computed: the job ends FAILED, saying why."""

    reason: str


def _plan(job: DueJob, now_ms: int) -> TriggerPlan | Unplannable:
    """The trigger's plan; a job whose schedule cannot be computed settles alone."""
    try:
        jitter = jitter_offset_ms(job.id, job.trigger_time, job.policy.jitter_seconds)
        plan = plan_trigger(job.policy, job.trigger_time, now_ms, jitter)
    except Exception as e:
        if is_store_outage(e):
            raise
        reason = f"cannot compute this job's schedule ({type(e).__name__}: {e}); job ended"
        log.error(reason, extra={"job_id": job.id})
        return Unplannable(reason[:1000])
    if plan.end_reason is not None:
        log.warning("%s; this is the job's last run", plan.end_reason, extra={"job_id": job.id})
    return plan


def trigger_execution(
    job: DueJob, plan: TriggerPlan | Unplannable, tracing: Tracing = NO_TRACING
) -> NewExecution:
    """The execution row a claimed trigger becomes: SCHEDULED, or SKIPPED with its reason
    (FAILED when its plan could not be computed). It carries ``run_trace``."""
    if isinstance(plan, Unplannable):
        fire_at, status, message = job.trigger_time, ExecutionStatus.FAILED, plan.reason
    elif plan.run:
        fire_at, status, message = plan.fire_at, ExecutionStatus.SCHEDULED, None
    else:
        fire_at, status, message = plan.fire_at, ExecutionStatus.SKIPPED, plan.reason
    execution_id = trigger_execution_id(job)
    trace = run_trace(job, tracing)
    return NewExecution(
        execution_id, job.id, 1, job.trigger_time, fire_at, status, message, traceparent=trace
    )


def run_trace(job: DueJob, tracing: Tracing = NO_TRACING) -> str | None:
    """The traceparent a claimed trigger's run carries: a one-shot job's run continues its
    submit (the job's own); each run of a recurring job is a branch of the job's trace
    under a trigger span of its own (``spans.branch``); a job without one gives none."""
    if job.traceparent is None or not job.policy.schedule.recurring:
        return job.traceparent
    attributes = {"kairos.job_id": job.id, "kairos.trigger_time": job.trigger_time}
    return branch(tracing, job.traceparent, attributes)


class TriggerClaimer:
    """Claims the triggers due within a window ahead, so each can fire at its own time.

    A claimed trigger is an execution row committed with the job's move to its next
    trigger: SCHEDULED, which whichever dispatcher leads later fires, so it is never
    lost; or, when it is already due and the ``sender`` finds a live worker for it,
    QUEUED and sent before the claim commits.
    """

    def __init__(
        self,
        engine: Engine,
        clock: ClusterClock,
        batch_size: int,
        window_ms: int,
        sender: ClaimSender,
        tracing: Tracing = NO_TRACING,
        alerts: RuleSource | None = None,
    ):
        self._engine = engine
        # The alert rules a trigger the claim itself ends FAILED fires.
        self._alerts = alerts
        self._clock = clock
        self._batch_size = batch_size
        self._window_ms = window_ms
        self._sender = sender
        self._tracing = tracing
        self._backlog_idle_until = 0

    def claim(self, handlers: Iterable[str], keep_going: Callable[[], bool] = lambda: True) -> int:
        """Claim one batch; returns how many due jobs the scan found.

        A batch with executions to send is handed over with its transaction open (see
        ``claim_handover``); ``keep_going`` says how long to wait for the dispatch loop
        to take it.

        A trigger that already has its execution (a job whose schedule was changed back
        onto a trigger claimed before) made the whole batch fail on the unique key, again
        at every pass; then the batch is claimed again without such triggers.
        """
        try:
            return self._claim(handlers, keep_going, skip_taken=False)
        except IntegrityError as e:
            if not is_duplicate_key(e):
                raise
            return self._claim(handlers, keep_going, skip_taken=True)

    def _due(self, conn: Connection, handlers: Iterable[str], now: int) -> list[DueJob]:
        """The triggers this claim takes: those due from ``ON_TIME_MS`` ago to the window
        ahead, soonest first; then, in the room left, those later than that, least late
        first.

        A trigger found late is claimed late, and a job catching up (FIRE_ALL) is due
        again after each claim, its next trigger still the oldest of all: by age alone,
        enough of them took every claim, and every other job waited until they caught
        up. Least late first, a job merely late (an outage) comes before one far behind.
        A look at the backlog that found nothing is not repeated for ``BACKLOG_IDLE_MS``.
        """
        names = list(handlers)
        found = find_due_jobs(
            conn,
            now + self._window_ms,
            names,
            self._batch_size,
            skip_locked=True,
            since_ms=now - ON_TIME_MS,
        )
        room = self._batch_size - len(found)
        if room > 0 and now >= self._backlog_idle_until:
            late = find_due_jobs(
                conn, now - ON_TIME_MS - 1, names, room, skip_locked=True, latest_first=True
            )
            self._backlog_idle_until = 0 if late else now + BACKLOG_IDLE_MS
            found += late
        return found

    @retry_conflicts("claim")
    def _claim(
        self, handlers: Iterable[str], keep_going: Callable[[], bool], skip_taken: bool
    ) -> int:
        now = self._clock.now_ms()
        conn = self._engine.connect()
        transaction = conn.begin()
        try:
            due = self._due(conn, handlers, now)
            plans = {job.id: _plan(job, now) for job in due}
            updates = {job_id: claim_update(plan) for job_id, plan in plans.items()}
            won = claim_jobs(conn, due, updates, now)
            created = [trigger_execution(j, plans[j.id], self._tracing) for j in due if j.id in won]
            if skip_taken:
                created = _without_taken(conn, created)
            record_claim_failures(conn, created, now, self._alerts)
            sent, packs, waiting = self._sender.insert(conn, created, {j.id: j for j in due}, now)
            if not sent:
                transaction.commit()
        except BaseException:
            transaction.rollback()
            conn.close()
            raise

        jobs = {j.id: j for j in due}
        held = [held_row(w, jobs[w.row.job_id], updates[w.row.job_id]) for w in waiting]

        def committed() -> None:
            _observe(created)
            self._sender.scheduled(held)

        if sent:
            claim = OpenClaim(conn, transaction, sent, packs, now, committed)
            if not self._sender.hand_over(claim, keep_going):
                return 0
        else:
            conn.close()
            committed()
        return len(due)


def _without_taken(conn: Connection, created: Sequence[NewExecution]) -> list[NewExecution]:
    """``created`` less the triggers that already have an execution (logged)."""
    taken = triggers_with_executions(conn, [(e.job_id, e.trigger_time, e.attempt) for e in created])
    for e in created:
        if (e.job_id, e.trigger_time, e.attempt) in taken:
            log.warning(
                "trigger at %d already has its execution; not created again",
                e.trigger_time,
                extra={"job_id": e.job_id},
            )
    return [e for e in created if (e.job_id, e.trigger_time, e.attempt) not in taken]


def _observe(created: Sequence[NewExecution]) -> None:
    """Count and log a claim's executions once it committed."""
    skipped = [e for e in created if e.status is ExecutionStatus.SKIPPED]
    observe_claim(len(created), len(skipped))
    for execution in skipped:
        log.info(
            execution.message or "trigger skipped",
            extra={"job_id": execution.job_id, "execution_id": execution.execution_id},
        )
