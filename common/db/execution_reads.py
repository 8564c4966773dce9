"""Reading executions for the API: a job's executions one page at a time, and one
execution by its id for the app that owns it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.records import ExecutionRecord
from common.db.schema import executions, jobs
from common.states import ExecutionStatus


@dataclass(frozen=True)
class ExecutionPage:
    """Which of a job's executions a page holds: statuses to match (empty: all), trigger
    times from ``since_ms``, those after the ``(trigger_time, attempt)`` of the last row
    of the previous page, at most ``limit``."""

    statuses: Sequence[ExecutionStatus] = ()
    since_ms: int | None = None
    after: tuple[int, int] | None = None
    limit: int = 50


def page_for_job(conn: Connection, job_id: int, page: ExecutionPage) -> list[ExecutionRecord]:
    """One page of a job's executions, newest first (trigger time, then attempt).

    The unique key (job_id, trigger_time, attempt) orders the rows and finds where a
    page starts, so a page costs the same however deep into a long history it is.
    """
    c = executions.c
    query = sa.select(executions).where(c.job_id == job_id)
    if page.statuses:
        query = query.where(c.status.in_([s.value for s in page.statuses]))
    if page.since_ms is not None:
        query = query.where(c.trigger_time >= page.since_ms)
    if page.after is not None:
        time, attempt = page.after
        query = query.where(
            sa.or_(c.trigger_time < time, sa.and_(c.trigger_time == time, c.attempt < attempt))
        )
    ordered = query.order_by(c.trigger_time.desc(), c.attempt.desc()).limit(page.limit)
    return [ExecutionRecord.from_row(r) for r in conn.execute(ordered)]


def find_for_app(conn: Connection, app_pk: int, execution_id: str) -> ExecutionRecord | None:
    """The execution with this id if it belongs to a live (not deleted) job of the app."""
    query = (
        sa.select(executions)
        .select_from(executions.join(jobs, executions.c.job_id == jobs.c.id))
        .where(
            executions.c.execution_id == execution_id,
            jobs.c.app_pk == app_pk,
            jobs.c.deleted_at.is_(None),
        )
    )
    row = conn.execute(query).first()
    return ExecutionRecord.from_row(row) if row is not None else None


def find(conn: Connection, execution_id: str) -> ExecutionRecord | None:
    """The execution with this id, whichever app's job it is (for operators)."""
    row = conn.execute(
        sa.select(executions).where(executions.c.execution_id == execution_id)
    ).first()
    return ExecutionRecord.from_row(row) if row is not None else None
