"""Job control: what each action may do from each status, and its transaction.

- pause: WAITING or RUNNING -> PAUSED; PAUSED again is a no-op (200).
- resume: PAUSED -> WAITING (or RUNNING while a run holds the job); WAITING or
  RUNNING is a no-op.
- cancel: WAITING, RUNNING or PAUSED -> CANCELLED with its SCHEDULED executions;
  CANCELLED again is a no-op.
- trigger: a manual execution for a job in any status but CANCELLED.
- update: a WAITING, RUNNING or PAUSED job's definition.
- delete: any job (soft delete, as cancel does); a deleted job is gone (404).

Anything else is refused with 409 (``InvalidTransitionError``) and changes nothing.
What would run a job's handler anew (trigger, resume, update) is refused, and changes
nothing, when the app may no longer use that handler (its handler patterns changed
after the job was stored): 403 (``JobHandlerForbiddenError``) for trigger and resume,
422 naming ``jobHandler`` for update. Pause, cancel and delete always work, so an app
can stop what it may no longer start.

Every transaction function may run again after a lock conflict (``retry_conflicts``,
stage ``api_control``); each starts from a fresh read, so a repeat is safe.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Set
from dataclasses import dataclass

import pydantic
from sqlalchemy.engine import Connection, Engine

from common.db import executions
from common.db import job_control as db
from common.db.apps import App
from common.db.job_dependencies import (
    After,
    check_no_cycle,
    check_parents,
    parents_of_jobs,
    replace_edges,
)
from common.db.jobs import JobColumns, get_job
from common.db.records import JobRecord
from common.db.retry import retry_conflicts
from common.documents import JsonObject, stored_text
from common.errors import (
    InvalidTransitionError,
    JobHandlerForbiddenError,
    JobNotFoundError,
    KairosError,
    ValidationFailedError,
)
from common.schedule import OverlapPolicy, PauseGap, Schedule, pause_gap
from common.states import JobStatus
from services.api.callback_screening import screen_callback_url_from_thread
from services.api.job_audit import audit_job, audit_update
from services.api.quotas import check_retries, check_schedule_interval
from services.api.schemas import JobCreate, JobList, JobPatch, JobView
from services.api.state import ApiState
from services.api.store_refusals import as_refusal
from services.api.validation import build_after, build_job
from services.api.views import job_view
from services.api.wake import wake_dispatcher

log = logging.getLogger(__name__)

# The stage job control's lock conflicts are counted under (``kairos_store_conflicts_total``).
STAGE = "api_control"

_FINAL = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class Rule:
    """Which statuses an action changes (``allowed``) and which already satisfy it."""

    action: str
    allowed: tuple[JobStatus, ...]
    settled: tuple[JobStatus, ...] = ()


PAUSE = Rule("pause", (JobStatus.WAITING, JobStatus.RUNNING), (JobStatus.PAUSED,))
RESUME = Rule("resume", (JobStatus.PAUSED,), (JobStatus.WAITING, JobStatus.RUNNING))
CANCEL = Rule("cancel", db.ACTIVE, (JobStatus.CANCELLED,))
TRIGGER = Rule("trigger", tuple(s for s in JobStatus if s is not JobStatus.CANCELLED))
UPDATE = Rule("update", db.ACTIVE)
DELETE = Rule("delete", tuple(JobStatus))


def applies(rule: Rule, job_id: int, status: str | None) -> bool:
    """True when ``rule`` changes a job in ``status``; False when it is already done.

    Raises ``JobNotFoundError`` for a job that is gone (None) and
    ``InvalidTransitionError`` for a status the action is refused from.
    """
    if status is None:
        raise JobNotFoundError(job_id)
    if status in rule.allowed:
        return True
    if status in rule.settled:
        return False
    raise InvalidTransitionError(job_id, status, rule.action, rule.allowed)


def status_of(job: JobRecord | None) -> str | None:
    """The status of a stored job; None for no job (gone)."""
    return str(job.status) if job is not None else None


def check_may_run(app: App, job: JobRecord, action: str) -> None:
    """Refuse to run a stored job anew (``action``: "triggered", "resumed") when its app
    may no longer use its handler."""
    if not app.handlers.allows(job.handler):
        shown = app.handlers.shown()
        raise JobHandlerForbiddenError(job.id, action, job.handler, app.app_id, shown)


def _held_again(conn: Connection, job: JobRecord) -> bool:
    """Whether a resumed job goes back to RUNNING: a one-shot job, or a recurring one
    under overlap policy QUEUE, whose own (not manual) run has not ended; the results
    consumer releases it when that run ends."""
    holds = not job.schedule.recurring or job.overlap_policy == OverlapPolicy.QUEUE
    return holds and db.has_own_run(conn, job.id)


# Pause and resume lock the job row first and then read executions without locking, so
# a run that ends meanwhile waits for this commit before it releases the job.


@retry_conflicts(STAGE)
def _pause(engine: Engine, app: App, job_id: int, now: int) -> bool:
    app_pk = app.id
    with engine.begin() as conn:
        before = status_of(db.lock_job(conn, app_pk, job_id))
        if not applies(PAUSE, job_id, before):
            return False
        if db.set_status(conn, app_pk, job_id, PAUSE.allowed, JobStatus.PAUSED, now):
            audit_job(conn, app, job_id, "pause", before, JobStatus.PAUSED, now)
            return True
        applies(PAUSE, job_id, db.job_status(conn, app_pk, job_id))
        return False


def pause_job(state: ApiState, app: App, job_id: int) -> None:
    """WAITING or RUNNING -> PAUSED: the due scan stops taking it; runs going continue."""
    if _pause(state.engine, app, job_id, state.clock.now_ms()):
        log.info("job paused", extra={"job_id": job_id})


@retry_conflicts(STAGE)
def _resume(engine: Engine, app: App, job_id: int, now: int) -> JobRecord | None:
    app_pk = app.id
    with engine.begin() as conn:
        job = db.lock_job(conn, app_pk, job_id)
        if not applies(RESUME, job_id, status_of(job)):
            return None
        assert job is not None
        check_may_run(app, job, "resumed")
        target = JobStatus.RUNNING if _held_again(conn, job) else JobStatus.WAITING
        moved = _skip_the_pause(conn, job, now)
        if moved is not None and moved.next_trigger is None and target is JobStatus.WAITING:
            target = JobStatus.FAILED  # its cron has no time left after the pause
        values = {} if moved is None else {"next_trigger_time": moved.next_trigger}
        if db.set_status(conn, app_pk, job_id, RESUME.allowed, target, now, **values):
            audit_job(conn, app, job_id, "resume", job.status, target, now)
            return job
        applies(RESUME, job_id, db.job_status(conn, app_pk, job_id))
        return None


def _skip_the_pause(conn: Connection, job: JobRecord, now: int) -> PauseGap | None:
    """A recurring job's triggers that fell inside the pause are recorded SKIPPED and its
    next trigger moves to the first at or after ``now``; None when nothing moves (a
    one-shot job keeps its trigger, a stored cron no longer accepted is left to the
    claim, which ends that job with its reason)."""
    schedule = job.schedule
    if not schedule.recurring or job.next_trigger_time is None:
        return None
    if job.next_trigger_time >= now:
        return None
    try:
        gap = pause_gap(schedule, job.next_trigger_time, now)
    except KairosError:
        return None
    db.skip_paused_triggers(conn, job, gap.skipped, gap.more, now)
    return gap


def resume_job(state: ApiState, app: App, job_id: int) -> None:
    """PAUSED -> WAITING; a recurring job's triggers that fell inside the pause are
    recorded SKIPPED and it waits for its first trigger after now (a one-shot job keeps
    its trigger, which runs now if it came during the pause).

    A job whose own run is still going goes back to RUNNING when that run holds it (a
    one-shot job, or overlap policy QUEUE); it is released when the run ends.
    """
    now = state.clock.now_ms()
    job = _resume(state.engine, app, job_id, now)
    if job is not None:
        log.info("job resumed", extra={"job_id": job_id})
        if job.next_trigger_time is not None:
            wake_dispatcher(state, job.next_trigger_time, now)


@retry_conflicts(STAGE)
def _cancel(engine: Engine, app: App, job_id: int, now: int, rule: Rule) -> int | None:
    app_pk = app.id
    # Checked first without locks, so a refused or repeated cancel takes none.
    with engine.begin() as conn:
        before = db.job_status(conn, app_pk, job_id)
        if not applies(rule, job_id, before):
            return None
        cancelled = db.cancel_job(conn, app_pk, job_id, rule.allowed, now, delete=rule is DELETE)
        if cancelled is None:
            # No status ever leads back out of a final one, so this re-read is final too.
            applies(rule, job_id, db.job_status(conn, app_pk, job_id))
        else:
            action = "delete" if rule is DELETE else "cancel"
            audit_job(conn, app, job_id, action, before, JobStatus.CANCELLED, now)
        return cancelled


def cancel_job(state: ApiState, app: App, job_id: int) -> None:
    """WAITING, RUNNING or PAUSED -> CANCELLED, with its SCHEDULED executions.

    Runs already sent to a worker go on; their results are recorded and the job stays
    CANCELLED.
    """
    cancelled = _cancel(state.engine, app, job_id, state.clock.now_ms(), CANCEL)
    if cancelled is not None:
        log.info("job cancelled (%d scheduled executions)", cancelled, extra={"job_id": job_id})


def delete_job(state: ApiState, app: App, job_id: int) -> None:
    """Soft delete: CANCELLED as by ``cancel_job``, and gone from every read after."""
    cancelled = _cancel(state.engine, app, job_id, state.clock.now_ms(), DELETE)
    log.info("job deleted (%d scheduled executions)", cancelled or 0, extra={"job_id": job_id})


def _stored_request(job: JobRecord) -> JsonObject:
    """A stored job as the create request that would store it."""
    return {
        "jobName": job.job_name,
        "jobHandler": job.handler,
        "params": json.loads(job.params),
        "cronExpr": job.cron_expr,
        "callbackUrl": job.callback_url,
        "timezone": job.timezone,
        "fixedRateSeconds": job.fixed_rate_seconds,
        "misfirePolicy": job.misfire_policy,
        "misfireThresholdSeconds": job.misfire_threshold_seconds,
        "catchUpWindowSeconds": job.catch_up_window_seconds,
        "overlapPolicy": job.overlap_policy,
        "maxRetries": job.max_retries,
        "retryBackoffSeconds": job.retry_backoff_seconds,
        "retryBackoffMaxSeconds": job.retry_backoff_max_seconds,
        "timeoutSeconds": job.timeout_seconds,
        "priority": job.priority,
        "jitterSeconds": job.jitter_seconds,
    }


def merged_request(job: JobRecord, changes: JsonObject) -> JobCreate:
    """The stored job with ``changes`` applied, as a create request to validate."""
    try:
        return JobCreate.model_validate({**_stored_request(job), **changes})
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise ValidationFailedError(field, first["msg"]) from e


def check_schedule_kind(job: JobRecord, changes: JsonObject, merged: JobCreate) -> None:
    """A one-shot job stays one-shot and a recurring job stays recurring."""
    if not job.schedule.recurring:
        for field in ("cronExpr", "fixedRateSeconds"):
            if changes.get(field) is not None:
                raise ValidationFailedError(
                    field, "a one-shot job cannot be given a schedule; submit a new job with it"
                )
    elif merged.cronExpr is None and merged.fixedRateSeconds is None:
        field = "cronExpr" if job.cron_expr is not None else "fixedRateSeconds"
        raise ValidationFailedError(
            field,
            "a recurring job cannot become one-shot; give cronExpr or fixedRateSeconds, "
            "or cancel it and submit a one-shot job",
        )


def patched_columns(
    app: App,
    stored: JobRecord,
    patch: JobPatch,
    handlers: Set[str],
    max_params_bytes: int,
    now: int,
) -> JobColumns:
    """The job columns a patch changes, validated as ``build_job`` validates a create.

    The handler cannot be patched, so the stored one counts as known even while no
    worker registers it; it must still be one the app may use (its handler patterns
    may have changed since the job was stored). A changed schedule of a recurring job
    fires next at its first time after now.
    """
    changes = patch.model_dump(exclude_unset=True)
    merged = merged_request(stored, changes)
    check_schedule_kind(stored, changes, merged)
    known = handlers | {stored.handler}
    job = build_job(merged, app, known, max_params_bytes, now, check_quotas=False)
    columns: JobColumns = {
        "job_name": job.job_name,
        "params": stored_text(job.params),
        "cron_expr": job.cron_expr,
        "callback_url": job.callback_url,
        "priority": job.priority,
        **job.policies.columns(),
    }
    schedule = Schedule(job.cron_expr, job.policies.timezone, job.policies.fixed_rate_seconds)
    if schedule.recurring and schedule != stored.schedule:
        # Only a changed schedule meets the app's interval quota: one set after the job
        # was stored does not block a patch of its other fields.
        check_schedule_interval(schedule, app, now)
        columns["next_trigger_time"] = schedule.first_after(now, now)
    if job.policies.max_retries != stored.max_retries:
        # Likewise a limit lowered after the job was stored binds only a new value; the
        # dispatcher applies it to the stored one.
        check_retries(job.policies.max_retries, app)
    return {name: value for name, value in columns.items() if getattr(stored, name) != value}


@retry_conflicts(STAGE)
def _update(
    state: ApiState, app: App, job_id: int, patch: JobPatch, now: int
) -> tuple[JobRecord, JobColumns]:
    handlers, max_bytes = state.known_handlers(), state.settings.max_params_bytes
    # An invalid patch raises inside the transaction: it rolls back, nothing is written.
    with state.engine.begin() as conn:
        job = db.lock_job(conn, app.id, job_id)
        applies(UPDATE, job_id, status_of(job))
        assert job is not None
        columns = patched_columns(app, job, patch, handlers, max_bytes, now)
        if columns and not _store_update(conn, app.id, job_id, columns, now):
            applies(UPDATE, job_id, db.job_status(conn, app.id, job_id))
        if patch.after is not None:
            _replace_parents(conn, app.id, job_id, build_after(patch.after))
        audit_update(conn, app, job, columns, patch, now)
        return job, columns


def _replace_parents(conn: Connection, app_pk: int, job_id: int, after: tuple[After, ...]) -> None:
    """Make ``after`` the job's parents, refused (nothing written) when one is missing,
    another app's or deleted, or when they would close a cycle (the graph is walked in
    this transaction, with shared locks on the edges read)."""
    check_parents(conn, app_pk, after)
    check_no_cycle(conn, app_pk, job_id, after)
    replace_edges(conn, job_id, after)


def _store_update(
    conn: Connection, app_pk: int, job_id: int, columns: JobColumns, now: int
) -> bool:
    """``db.update_job``; a value MySQL refuses is a 422 naming its field."""
    try:
        return db.update_job(conn, app_pk, job_id, UPDATE.allowed, columns, now)
    except Exception as e:
        refusal = as_refusal(e)
        if refusal is None:
            raise
        raise refusal from e


def update_job(state: ApiState, app: App, job_id: int, patch: JobPatch) -> None:
    """Change a live job's definition; a patch that changes nothing writes nothing.

    A new callback URL is checked (its host resolved) before the job's row is locked.
    """
    policy, resolver = state.policy_for(app), state.resolvers(app.id)
    screen_callback_url_from_thread(policy, resolver, patch.callbackUrl)
    now = state.clock.now_ms()
    _, columns = _update(state, app, job_id, patch, now)
    if columns:
        log.info("job updated: %s", ", ".join(sorted(columns)), extra={"job_id": job_id})
    if columns.get("next_trigger_time") is not None:
        wake_dispatcher(state, int(columns["next_trigger_time"]), now)


def read_job_view(state: ApiState, app: App, job_id: int) -> JobView:
    """The job as GET /openapi/jobs/{jobId} shows it."""
    with state.engine.connect() as conn:
        job = get_job(conn, app.id, job_id)
        if job is None:
            raise JobNotFoundError(job_id)
        last = executions.list_for_job(conn, job_id, 1)
        running = bool(executions.jobs_with_runs(conn, [job_id]))
        after = parents_of_jobs(conn, [(job.id, job.has_dependencies)]).get(job.id, [])
    return job_view(job, last[0] if last else None, running, after=after)


def encode_cursor(job_id: int) -> str:
    """The opaque cursor after ``job_id``: its id in URL-safe base64."""
    return base64.urlsafe_b64encode(str(job_id).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The job id a cursor from ``encode_cursor`` holds; 422 for anything else."""
    try:
        text = base64.b64decode(cursor + "=" * (-len(cursor) % 4), b"-_", validate=True)
        value = int(text.decode("ascii")) if text.isdigit() else 0
    except (binascii.Error, ValueError):
        value = 0
    if not 0 < value < 2**63 or encode_cursor(value) != cursor:
        raise ValidationFailedError("cursor", "not a cursor this API returned; start without it")
    return value


def list_jobs(
    state: ApiState, app: App, where: db.JobFilter, limit: int, cursor: str | None
) -> JobList:
    """One page of the app's live jobs, newest first, with the cursor of the next page.

    Three reads: the page (one row more than ``limit`` tells whether another page
    follows), the newest execution of each job, and which jobs have a run going.
    """
    before = decode_cursor(cursor) if cursor is not None else None
    with state.engine.connect() as conn:
        found = db.list_jobs(conn, app.id, where, before, limit + 1)
        page = found[:limit]
        ids = [job.id for job in page]
        last = db.last_executions(conn, ids)
        running = executions.jobs_with_runs(conn, ids)
        after = parents_of_jobs(conn, [(job.id, job.has_dependencies) for job in page])
    views = [
        job_view(job, last.get(job.id), job.id in running, after=after.get(job.id, []))
        for job in page
    ]
    more = len(found) > limit
    return JobList(jobs=views, nextCursor=encode_cursor(ids[-1]) if more else None)
