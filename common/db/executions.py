"""Executions: one row per attempt at one trigger, the history the API shows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.rows import AnyRow
from common.db.schema import executions, jobs
from common.states import ExecutionStatus


@dataclass(frozen=True)
class NewExecution:
    """An execution the dispatcher creates for a claimed trigger."""

    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    worker_id: str


def insert_executions(conn: Connection, rows: Sequence[NewExecution], now_ms: int) -> None:
    """Insert PENDING executions in one multi-row statement.

    The unique key (job_id, trigger_time, attempt) makes the database refuse a second
    execution of the same trigger, whatever a dispatcher believes.
    """
    if not rows:
        return
    conn.execute(
        executions.insert(),
        [
            {
                "execution_id": r.execution_id,
                "job_id": r.job_id,
                "attempt": r.attempt,
                "trigger_time": r.trigger_time,
                "worker_id": r.worker_id,
                "status": ExecutionStatus.PENDING,
                "created_at": now_ms,
            }
            for r in rows
        ],
    )


def primary_keys(conn: Connection, execution_ids: Iterable[str]) -> list[int]:
    """The primary keys of these executions, ascending, read without locking."""
    ids = list(execution_ids)
    if not ids:
        return []
    return sorted(
        conn.execute(sa.select(executions.c.id).where(executions.c.execution_id.in_(ids))).scalars()
    )


def mark_queued(conn: Connection, execution_ids: Iterable[str], now_ms: int) -> None:
    """Record that these executions are confirmed in a worker queue.

    Every transaction that changes executions locks them by primary key in ascending
    order (see ``lock_unfinished``), so the dispatcher and the results consumer never
    wait on each other in a circle when a result arrives before its QUEUED mark.
    """
    keys = primary_keys(conn, execution_ids)
    if not keys:
        return
    # Only the primary key may appear in WHERE: a status predicate lets the optimizer
    # walk the status index first, which is the opposite lock order.
    pending = executions.c.status == ExecutionStatus.PENDING
    stamp = sa.case((pending, now_ms), else_=executions.c.dispatched_at)
    queued = sa.case((pending, ExecutionStatus.QUEUED.value), else_=executions.c.status)
    conn.execute(
        executions.update()
        .where(executions.c.id.in_(keys))
        # MySQL applies SET left to right: dispatched_at must read status before it changes.
        .ordered_values((executions.c.dispatched_at, stamp), (executions.c.status, queued))
    )


def _with_job(*where: Any) -> sa.Select[Any]:
    return (
        sa.select(
            executions.c.execution_id,
            executions.c.job_id,
            executions.c.attempt,
            executions.c.trigger_time,
            executions.c.worker_id,
            executions.c.status,
            jobs.c.handler,
            jobs.c.params,
        )
        .join(jobs, jobs.c.id == executions.c.job_id)
        .where(*where)
    )


def stale_pending(conn: Connection, created_before_ms: int, limit: int) -> list[AnyRow]:
    """PENDING executions older than the cut-off: their publish failed or was never made."""
    return list(
        conn.execute(
            _with_job(
                executions.c.status == ExecutionStatus.PENDING,
                executions.c.created_at < created_before_ms,
            ).limit(limit)
        ).all()
    )


def unfinished_on_worker(conn: Connection, worker_id: str, limit: int) -> list[AnyRow]:
    """Executions handed to one worker that have not ended."""
    return list(
        conn.execute(
            _with_job(
                executions.c.worker_id == worker_id,
                executions.c.status.in_([ExecutionStatus.PENDING, ExecutionStatus.QUEUED]),
            ).limit(limit)
        ).all()
    )


def reassign(conn: Connection, execution_id: str, worker_id: str) -> None:
    """Point an unfinished execution at another worker."""
    conn.execute(
        executions.update()
        .where(executions.c.execution_id == execution_id)
        .values(worker_id=worker_id)
    )


def inflight_by_worker(conn: Connection) -> dict[str, int]:
    """How many executions each worker has been handed and not finished."""
    rows = conn.execute(
        sa.select(executions.c.worker_id, sa.func.count())
        .where(executions.c.status.in_([ExecutionStatus.PENDING, ExecutionStatus.QUEUED]))
        .group_by(executions.c.worker_id)
    ).all()
    return {str(worker): int(count) for worker, count in rows}


def lock_unfinished(conn: Connection, execution_ids: Sequence[str]) -> list[AnyRow]:
    """Lock ``execution_ids`` by primary key, ascending, and return the unfinished ones.

    Two result consumers that see the same result agree on which of them records it.
    """
    keys = primary_keys(conn, execution_ids)
    if not keys:
        return []
    rows = conn.execute(
        sa.select(
            executions.c.id,
            executions.c.execution_id,
            executions.c.job_id,
            executions.c.attempt,
            executions.c.trigger_time,
            executions.c.status,
        )
        .where(executions.c.id.in_(keys))
        .order_by(executions.c.id)
        .with_for_update()
    ).all()
    unfinished = {ExecutionStatus.PENDING, ExecutionStatus.QUEUED}
    return [r for r in rows if r.status in unfinished]


def record_outcomes(conn: Connection, outcomes: Sequence[dict[str, Any]]) -> None:
    """Write final states; each dict holds id (the primary key), status, worker_id,
    message, result, started_at and ended_at."""
    if not outcomes:
        return
    conn.execute(
        executions.update()
        .where(executions.c.id == sa.bindparam("b_id"))
        .values(
            status=sa.bindparam("b_status"),
            worker_id=sa.bindparam("b_worker_id"),
            message=sa.bindparam("b_message"),
            result=sa.bindparam("b_result"),
            started_at=sa.bindparam("b_started_at"),
            ended_at=sa.bindparam("b_ended_at"),
        ),
        [{f"b_{k}": v for k, v in o.items()} for o in sorted(outcomes, key=lambda o: o["id"])],
    )


def list_for_job(conn: Connection, job_id: int, limit: int) -> list[AnyRow]:
    """A job's executions, newest first."""
    return list(
        conn.execute(
            sa.select(executions)
            .where(executions.c.job_id == job_id)
            .order_by(executions.c.trigger_time.desc(), executions.c.attempt.desc())
            .limit(limit)
        ).all()
    )
