"""What the console reads across every app: jobs by filter, one job (the apps by key:
``AppStore.apps_by_key``).

The OpenAPI's reads are scoped to the calling app (``common.db.job_control``); an operator
sees the jobs of every app it reaches (``AppScope``), so these queries take a scope, and
an app as a filter.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.records import ExecutionRecord, JobRecord
from common.db.schema import executions, jobs
from common.operator_roles import EVERY_APP, AppScope
from common.states import JobStatus


@dataclass(frozen=True)
class JobQuery:
    """A console job list: filters (None: any) and the page."""

    app_pk: int | None = None
    status: JobStatus | None = None
    handler: str | None = None
    name_prefix: str | None = None
    before_id: int | None = None
    limit: int = 50
    scope: AppScope = EVERY_APP
    """The apps the reader reaches: another app's jobs are not found."""


def find_jobs(conn: Connection, query: JobQuery) -> list[JobRecord]:
    """Live jobs matching ``query``, newest first; one row more than the limit tells
    whether another page follows."""
    select = (
        sa.select(jobs)
        .where(jobs.c.deleted_at.is_(None))
        .order_by(jobs.c.id.desc())
        .limit(query.limit + 1)
    )
    if query.app_pk is not None:
        select = select.where(jobs.c.app_pk == query.app_pk)
    if query.scope.app_pks is not None:
        select = select.where(jobs.c.app_pk.in_(query.scope.app_pks or [0]))
    if query.before_id is not None:
        select = select.where(jobs.c.id < query.before_id)
    if query.status is not None:
        select = select.where(jobs.c.status == query.status)
    if query.handler:
        select = select.where(jobs.c.handler == query.handler)
    if query.name_prefix:
        select = select.where(jobs.c.job_name.startswith(query.name_prefix, autoescape=True))
    return [JobRecord.from_row(r) for r in conn.execute(select)]


def find_job(conn: Connection, job_id: int, scope: AppScope = EVERY_APP) -> JobRecord | None:
    """One live job of an app in ``scope`` (any app by default)."""
    row = conn.execute(
        sa.select(jobs).where(jobs.c.id == job_id, jobs.c.deleted_at.is_(None))
    ).first()
    if row is None or not scope.includes(int(row.app_pk)):
        return None
    return JobRecord.from_row(row)


def executions_of_job(
    conn: Connection, job_id: int, limit: int, status: str | None = None
) -> list[ExecutionRecord]:
    """A job's newest ``limit`` executions, only those in ``status`` when given."""
    select = (
        sa.select(executions)
        .where(executions.c.job_id == job_id)
        .order_by(executions.c.trigger_time.desc(), executions.c.attempt.desc())
        .limit(limit)
    )
    if status is not None:
        select = select.where(executions.c.status == status)
    return [ExecutionRecord.from_row(r) for r in conn.execute(select)]
