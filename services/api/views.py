"""Rows to response bodies."""

from __future__ import annotations

import json
from typing import Any

from common.timefmt import iso_ms
from services.api.schemas import ExecutionView, JobView


def _json_or_text(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def execution_view(row: Any) -> ExecutionView:
    """An execution row as the API shows it."""
    return ExecutionView(
        executionId=row.execution_id,
        attempt=row.attempt,
        triggerTime=iso_ms(row.trigger_time),
        workerId=row.worker_id,
        status=row.status,
        startedAt=iso_ms(row.started_at),
        endedAt=iso_ms(row.ended_at),
        message=row.message,
        result=_json_or_text(row.result),
    )


def job_view(row: Any, last: Any | None) -> JobView:
    """A job row (and its last execution row) as the API shows it."""
    return JobView(
        jobId=row.id,
        jobName=row.job_name,
        jobHandler=row.handler,
        params=json.loads(row.params),
        cronExpr=row.cron_expr,
        status=row.status,
        nextTriggerTime=iso_ms(row.next_trigger_time),
        callbackUrl=row.callback_url,
        clientRequestId=row.client_request_id,
        createdAt=iso_ms(row.created_at),
        updatedAt=iso_ms(row.updated_at),
        lastExecution=execution_view(last) if last is not None else None,
    )
