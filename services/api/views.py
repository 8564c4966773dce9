"""Rows to response bodies."""

from __future__ import annotations

from typing import Any

from common.jsontext import read_stored_json
from common.schedule import Schedule
from common.states import JobStatus
from common.timefmt import iso_ms
from services.api.schemas import ExecutionView, JobPoliciesView, JobView


def _json_or_text(raw: str | None) -> Any:
    """A stored result as JSON, or as its text when no JSON response could carry it
    (not JSON, nested too deep, NaN, a lone surrogate: see ``read_stored_json``)."""
    if raw is None:
        return None
    try:
        return read_stored_json(raw)
    except ValueError:
        return raw


def _params(raw: str) -> dict[str, Any]:
    """Stored params as JSON, or ``{"unrenderable": text}`` when no JSON response could
    carry them (rows stored before the API refused such params)."""
    try:
        params = read_stored_json(raw)
    except ValueError:
        return {"unrenderable": raw}
    return params if isinstance(params, dict) else {"unrenderable": raw}


def execution_view(row: Any) -> ExecutionView:
    """An execution row as the API shows it."""
    return ExecutionView(
        executionId=row.execution_id,
        jobId=row.job_id,
        attempt=row.attempt,
        manual=bool(row.manual),
        triggerTime=iso_ms(row.trigger_time),
        workerId=row.worker_id,
        status=row.status,
        scheduledAt=iso_ms(row.scheduled_at),
        dispatchedAt=iso_ms(row.dispatched_at),
        startedAt=iso_ms(row.started_at),
        endedAt=iso_ms(row.ended_at),
        message=row.message,
        result=_json_or_text(row.result),
    )


def shown_status(row: Any, running: bool) -> JobStatus:
    """The job status a client sees: a waiting recurring job with a run going is RUNNING."""
    if row.status == JobStatus.WAITING and running:
        return JobStatus.RUNNING
    return JobStatus(row.status)


def shown_next_trigger(row: Any) -> int | None:
    """The next trigger time, or None when the job will not fire again by schedule."""
    if row.status in (JobStatus.WAITING, JobStatus.PAUSED):
        return int(row.next_trigger_time) if row.next_trigger_time is not None else None
    if row.status == JobStatus.RUNNING and (row.cron_expr or row.fixed_rate_seconds):
        return int(row.next_trigger_time) if row.next_trigger_time is not None else None
    return None


def policies_view(row: Any) -> JobPoliciesView:
    """The policy columns as the API shows them."""
    return JobPoliciesView(
        timezone=row.timezone,
        fixedRateSeconds=row.fixed_rate_seconds,
        misfirePolicy=row.misfire_policy,
        misfireThresholdSeconds=row.misfire_threshold_seconds,
        catchUpWindowSeconds=row.catch_up_window_seconds,
        overlapPolicy=row.overlap_policy,
        maxRetries=row.max_retries,
        retryBackoffSeconds=row.retry_backoff_seconds,
        retryBackoffMaxSeconds=row.retry_backoff_max_seconds,
        timeoutSeconds=row.timeout_seconds,
    )


def upcoming_triggers(row: Any, count: int) -> list[str] | None:
    """The next ``count`` trigger times as ISO text, or None when none is asked for."""
    start = shown_next_trigger(row)
    if count <= 0 or start is None:
        return None
    schedule = Schedule(row.cron_expr, row.timezone, row.fixed_rate_seconds)
    return [t for t in (iso_ms(ms) for ms in schedule.preview(start, count)) if t is not None]


def job_view(row: Any, last: Any | None, running: bool, preview: int = 0) -> JobView:
    """A job row (and its last execution row) as the API shows it."""
    return JobView(
        jobId=row.id,
        jobName=row.job_name,
        jobHandler=row.handler,
        params=_params(row.params),
        cronExpr=row.cron_expr,
        status=shown_status(row, running),
        nextTriggerTime=iso_ms(shown_next_trigger(row)),
        nextTriggerTimes=upcoming_triggers(row, preview),
        policies=policies_view(row),
        callbackUrl=row.callback_url,
        clientRequestId=row.client_request_id,
        createdAt=iso_ms(row.created_at),
        updatedAt=iso_ms(row.updated_at),
        lastExecution=execution_view(last) if last is not None else None,
    )
