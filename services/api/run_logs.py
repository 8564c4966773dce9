"""Reading a run's log: the lines its handler wrote, one page at a time, for the app
that owns the execution (``GET /openapi/executions/{executionId}/logs``), the console
and the CLI."""

from __future__ import annotations

from pydantic import BaseModel, Field
from sqlalchemy.engine import Connection

from common.db import execution_logs, execution_reads
from common.db.records import ExecutionRecord
from common.errors import ExecutionNotFoundError
from common.states import ExecutionStatus
from common.timefmt import iso_ms
from services.api.fields import ExecutionId, Timestamp

UNENDED = (ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED)


class RunLogLine(BaseModel):
    """One line a handler logged (``ctx.log``, or standard ``logging`` while it ran)."""

    seq: int = Field(description="the line's place in the run's log, from 1")
    at: Timestamp
    level: str = Field(description="DEBUG, INFO, WARNING, ERROR or CRITICAL")
    line: str


class RunLogPage(BaseModel):
    """Lines of one execution's log, oldest first, and whether more may come."""

    executionId: ExecutionId
    status: ExecutionStatus
    lines: list[RunLogLine]
    nextAfter: int = Field(
        description="pass as ?after= for the lines that follow (the last seq shown, or the "
        "after given when the page is empty)"
    )
    ended: bool = Field(
        description="the execution has ended: once a page comes back empty, no line will "
        "be added; while false, a running handler may still log (lines show within about "
        "two seconds)"
    )


def run_log_page(
    conn: Connection, execution: ExecutionRecord, after: int, limit: int
) -> RunLogPage:
    """Up to ``limit`` lines of ``execution``'s log past seq ``after``."""
    rows = execution_logs.page_lines(conn, execution.execution_id, after, limit)
    lines = [RunLogLine(seq=r.seq, at=iso_ms(r.at) or "", level=r.level, line=r.line) for r in rows]
    return RunLogPage(
        executionId=execution.execution_id,
        status=execution.status,
        lines=lines,
        nextAfter=rows[-1].seq if rows else after,
        ended=execution.status not in UNENDED,
    )


def app_run_log(
    conn: Connection, app_pk: int, execution_id: str, after: int, limit: int
) -> RunLogPage:
    """The page of an execution of the app's live jobs; ``ExecutionNotFoundError`` for
    any other (another app's included)."""
    execution = execution_reads.find_for_app(conn, app_pk, execution_id)
    if execution is None:
        raise ExecutionNotFoundError(execution_id)
    return run_log_page(conn, execution, after, limit)


def operator_run_log(conn: Connection, execution_id: str, after: int, limit: int) -> RunLogPage:
    """The page of any app's execution, for operators (console and CLI)."""
    execution = execution_reads.find(conn, execution_id)
    if execution is None:
        raise ExecutionNotFoundError(execution_id)
    return run_log_page(conn, execution, after, limit)
