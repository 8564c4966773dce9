"""Executions that should have moved on by now: the reconciler's and operators' view.

A QUEUED execution is in a worker's queue or running; one QUEUED for much longer than
its jobs usually take may have slipped (its dispatch message lost, its result never
recorded). A SCHEDULED one past its time by as much was never fired. Neither query
decides anything: the reconciler and operators look further before they act.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.db import driver
from common.db.rows import AnyRow
from common.states import ExecutionStatus


@dataclass(frozen=True, slots=True)
class StuckExecution:
    """An unfinished execution and since when it has been in its state (cluster ms)."""

    id: int
    execution_id: str
    job_id: int
    attempt: int
    status: ExecutionStatus
    worker_id: str | None
    handler: str
    since_ms: int
    app_pk: int = 0
    """The row id of its job's app."""

    @classmethod
    def from_row(cls, row: AnyRow) -> StuckExecution:
        """The record of a row of ``_COLUMNS`` and a ``since`` column."""
        return cls(
            id=int(row.id),
            execution_id=str(row.execution_id),
            job_id=int(row.job_id),
            attempt=int(row.attempt),
            status=ExecutionStatus(row.status),
            worker_id=row.worker_id,
            handler=str(row.handler),
            since_ms=int(row.since),
            app_pk=int(row.app_pk),
        )


@dataclass(frozen=True)
class Page:
    """Where the previous page of a longest-first listing ended: its last row."""

    since_ms: int
    id: int


_COLUMNS = (
    "SELECT e.id, e.execution_id, e.job_id, e.attempt, e.status, e.worker_id, j.handler, j.app_pk, "
)


def queued_before(
    conn: Connection,
    dispatched_before_ms: int,
    limit: int,
    after: Page | None = None,
    app_pks: Collection[int] | None = None,
) -> list[StuckExecution]:
    """QUEUED executions dispatched before the cut-off, longest waiting first; with
    ``after``, only those that come after that row in this order (the next page); with
    ``app_pks``, only those of these apps' jobs."""
    return _in_state_before(
        conn, ExecutionStatus.QUEUED, "dispatched_at", dispatched_before_ms, limit, after, app_pks
    )


def scheduled_before(
    conn: Connection, due_before_ms: int, limit: int, app_pks: Collection[int] | None = None
) -> list[StuckExecution]:
    """SCHEDULED executions that were due before the cut-off, longest overdue first (only
    those of the apps ``app_pks`` when given)."""
    return _in_state_before(
        conn, ExecutionStatus.SCHEDULED, "scheduled_at", due_before_ms, limit, None, app_pks
    )


def _in_state_before(
    conn: Connection,
    status: ExecutionStatus,
    column: str,
    before_ms: int,
    limit: int,
    after: Page | None = None,
    app_pks: Collection[int] | None = None,
) -> list[StuckExecution]:
    page, params = "", tuple[int, ...]()
    if after is not None:
        page = f"AND (e.{column} > %s OR (e.{column} = %s AND e.id > %s)) "
        params = (after.since_ms, after.since_ms, after.id)
    if app_pks is not None:
        listed = sorted(app_pks) or [0]
        page += f"AND j.app_pk IN ({', '.join(['%s'] * len(listed))}) "
        params = (*params, *listed)
    rows = driver.fetch(
        conn,
        _COLUMNS + f"e.{column} AS since FROM executions e JOIN jobs j ON j.id = e.job_id "
        f"WHERE e.status = %s AND e.{column} < %s {page}ORDER BY e.{column}, e.id LIMIT %s",
        (status.value, before_ms, *params, limit),
    )
    return [StuckExecution.from_row(r) for r in rows]


def find_unfinished(conn: Connection, execution_id: str) -> StuckExecution | None:
    """One execution by its id, if it is still SCHEDULED or QUEUED."""
    rows = driver.fetch(
        conn,
        _COLUMNS + "COALESCE(e.dispatched_at, e.scheduled_at, e.created_at) AS since "
        "FROM executions e JOIN jobs j ON j.id = e.job_id "
        "WHERE e.execution_id = %s AND e.status IN (%s, %s)",
        (execution_id, ExecutionStatus.SCHEDULED.value, ExecutionStatus.QUEUED.value),
    )
    return StuckExecution.from_row(rows[0]) if rows else None


def requeue(conn: Connection, execution_id: str, now_ms: int) -> bool:
    """Make an unfinished execution SCHEDULED for now, on no worker; False if it ended."""
    changed = driver.execute(
        conn,
        "UPDATE executions SET status = %s, scheduled_at = %s, worker_id = NULL, "
        "dispatched_at = NULL WHERE execution_id = %s AND status IN (%s, %s)",
        (
            ExecutionStatus.SCHEDULED.value,
            now_ms,
            execution_id,
            ExecutionStatus.SCHEDULED.value,
            ExecutionStatus.QUEUED.value,
        ),
    )
    return changed > 0
