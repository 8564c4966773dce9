"""Stored jobs and executions to response bodies."""

from __future__ import annotations

from collections.abc import Sequence

from common.db.job_dependencies import After, waited_for
from common.db.records import ExecutionRecord, JobRecord
from common.documents import JsonObject, JsonValue
from common.jitter import jittered_ms
from common.jsontext import read_stored_json
from common.states import JobStatus
from common.timefmt import iso_ms
from services.api.schemas import (
    AfterJob,
    ExecutionView,
    JobPoliciesView,
    JobView,
    WaitedForRun,
)


def _json_or_text(raw: str | None) -> JsonValue:
    """A stored result as JSON, or as its text when no JSON response could carry it
    (not JSON, nested too deep, NaN, a lone surrogate: see ``read_stored_json``)."""
    if raw is None:
        return None
    try:
        return read_stored_json(raw)
    except ValueError:
        return raw


def _params(raw: str) -> JsonObject:
    """Stored params as JSON, or ``{"unrenderable": text}`` when no JSON response could
    carry them (rows stored before the API refused such params)."""
    try:
        params = read_stored_json(raw)
    except ValueError:
        return {"unrenderable": raw}
    return params if isinstance(params, dict) else {"unrenderable": raw}


def execution_view(execution: ExecutionRecord) -> ExecutionView:
    """A stored execution as the API shows it."""
    return ExecutionView(
        executionId=execution.execution_id,
        jobId=execution.job_id,
        attempt=execution.attempt,
        manual=execution.manual,
        backfill=execution.backfill,
        triggerTime=iso_ms(execution.trigger_time),
        workerId=execution.worker_id,
        status=execution.status,
        scheduledAt=iso_ms(execution.scheduled_at),
        dispatchedAt=iso_ms(execution.dispatched_at),
        startedAt=iso_ms(execution.started_at),
        endedAt=iso_ms(execution.ended_at),
        message=execution.message,
        result=_json_or_text(execution.result),
        params=None if execution.params is None else _params(execution.params),
        traceparent=execution.traceparent,
        waitedFor=_waited_for(execution.waited_for),
    )


def _waited_for(text: str | None) -> list[WaitedForRun] | None:
    """The stored parent runs as the API shows them."""
    runs = waited_for(text)
    return None if runs is None else [WaitedForRun.model_validate(r) for r in runs]


def shown_status(job: JobRecord, running: bool) -> JobStatus:
    """The job status a client sees: a waiting recurring job with a run going is RUNNING."""
    if job.status == JobStatus.WAITING and running:
        return JobStatus.RUNNING
    return job.status


def shown_next_trigger(job: JobRecord) -> int | None:
    """The next trigger time, or None when the job will not fire again by schedule."""
    if job.status in (JobStatus.WAITING, JobStatus.PAUSED):
        return job.next_trigger_time
    if job.status == JobStatus.RUNNING and (job.cron_expr or job.fixed_rate_seconds):
        return job.next_trigger_time
    return None


def policies_view(job: JobRecord) -> JobPoliciesView:
    """The policy columns as the API shows them."""
    return JobPoliciesView(
        timezone=job.timezone,
        fixedRateSeconds=job.fixed_rate_seconds,
        misfirePolicy=job.misfire_policy,
        misfireThresholdSeconds=job.misfire_threshold_seconds,
        catchUpWindowSeconds=job.catch_up_window_seconds,
        overlapPolicy=job.overlap_policy,
        maxRetries=job.max_retries,
        retryBackoffSeconds=job.retry_backoff_seconds,
        retryBackoffMaxSeconds=job.retry_backoff_max_seconds,
        timeoutSeconds=job.timeout_seconds,
        jitterSeconds=job.jitter_seconds,
    )


def upcoming_trigger_ms(job: JobRecord, count: int) -> list[int] | None:
    """The next ``count`` trigger times, or None when none is asked for or none comes."""
    start = shown_next_trigger(job)
    if count <= 0 or start is None:
        return None
    return job.schedule.preview(start, count)


def upcoming_triggers(job: JobRecord, count: int) -> list[str] | None:
    """The next ``count`` trigger times as ISO text, or None when none is asked for."""
    times = upcoming_trigger_ms(job, count)
    if times is None:
        return None
    return [t for t in map(iso_ms, times) if t is not None]


def upcoming_fires(job: JobRecord, count: int) -> list[str] | None:
    """When each of the next ``count`` triggers fires, its jitter added, as ISO text."""
    times = upcoming_trigger_ms(job, count)
    if times is None:
        return None
    fires = (jittered_ms(job.id, t, job.jitter_seconds) for t in times)
    return [t for t in map(iso_ms, fires) if t is not None]


def job_view(
    job: JobRecord,
    last: ExecutionRecord | None,
    running: bool,
    preview: int = 0,
    after: Sequence[After] = (),
) -> JobView:
    """A stored job (its last execution, its parents) as the API shows it."""
    return JobView(
        jobId=job.id,
        jobName=job.job_name,
        jobHandler=job.handler,
        params=_params(job.params),
        cronExpr=job.cron_expr,
        status=shown_status(job, running),
        nextTriggerTime=iso_ms(shown_next_trigger(job)),
        nextTriggerTimes=upcoming_triggers(job, preview),
        nextFireTimes=upcoming_fires(job, preview),
        policies=policies_view(job),
        priority=job.priority,
        callbackUrl=job.callback_url,
        clientRequestId=job.client_request_id,
        createdAt=iso_ms(job.created_at),
        updatedAt=iso_ms(job.updated_at),
        lastExecution=execution_view(last) if last is not None else None,
        traceparent=job.traceparent,
        after=[AfterJob(jobId=a.job_id, on=a.on) for a in after],
    )
