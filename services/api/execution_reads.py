"""Reading executions: a job's executions one page at a time (cursor, status, since),
and one execution by its id."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence

from common.db import execution_reads, jobs
from common.db.apps import App
from common.db.execution_reads import ExecutionPage
from common.errors import ExecutionNotFoundError, JobNotFoundError, ValidationFailedError
from common.states import ExecutionStatus
from common.timefmt import MAX_INSTANT_MS, MIN_INSTANT_MS, parse_instant
from services.api.schemas import ExecutionList, ExecutionView
from services.api.state import ApiState
from services.api.views import execution_view

_CURSOR_TEXT = re.compile(r"(\d{1,16}):(\d{1,9})")


def encode_cursor(trigger_time: int, attempt: int) -> str:
    """The opaque cursor after the execution of ``trigger_time`` and ``attempt``."""
    text = f"{trigger_time}:{attempt}".encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, int]:
    """The (trigger time, attempt) an ``encode_cursor`` cursor holds; 422 otherwise."""
    try:
        text = base64.b64decode(cursor + "=" * (-len(cursor) % 4), b"-_", validate=True)
        found = _CURSOR_TEXT.fullmatch(text.decode("ascii"))
    except (binascii.Error, ValueError):
        found = None
    if found is None or encode_cursor(int(found[1]), int(found[2])) != cursor:
        raise ValidationFailedError("cursor", "not a cursor this API returned; start without it")
    return int(found[1]), int(found[2])


def parse_since(since: str | None) -> int | None:
    """``since`` as epoch ms: ISO 8601 (UTC without an offset) or whole epoch ms."""
    if since is None:
        return None
    try:
        value = int(since) if since.isdigit() else parse_instant(since)
    except (ValueError, OverflowError):
        value = -1
    if not MIN_INSTANT_MS <= value <= MAX_INSTANT_MS:
        raise ValidationFailedError(
            "since",
            "must be ISO 8601 (2026-11-30T14:00:00Z) or whole epoch milliseconds, from 1970 "
            "through 9999",
        )
    return value


def list_executions(
    state: ApiState,
    app: App,
    job_id: int,
    statuses: Sequence[ExecutionStatus],
    since: str | None,
    limit: int,
    cursor: str | None,
) -> ExecutionList:
    """One page of the job's executions, newest first, with the next page's cursor."""
    page = ExecutionPage(
        statuses=tuple(statuses),
        since_ms=parse_since(since),
        after=decode_cursor(cursor) if cursor is not None else None,
        limit=limit + 1,
    )
    with state.engine.connect() as conn:
        if jobs.get_job(conn, app.id, job_id) is None:
            raise JobNotFoundError(job_id)
        rows = execution_reads.page_for_job(conn, job_id, page)
    shown = rows[:limit]
    more = len(rows) > limit
    last = shown[-1] if shown else None
    next_cursor = encode_cursor(last.trigger_time, last.attempt) if more and last else None
    views = [execution_view(r) for r in shown]
    return ExecutionList(jobId=job_id, executions=views, nextCursor=next_cursor)


def get_execution(state: ApiState, app: App, execution_id: str) -> ExecutionView:
    """The execution with this id, if a live job of the app owns it; 404 otherwise."""
    with state.engine.connect() as conn:
        row = execution_reads.find_for_app(conn, app.id, execution_id)
    if row is None:
        raise ExecutionNotFoundError(execution_id)
    return execution_view(row)
