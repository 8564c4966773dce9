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


def mark_queued(conn: Connection, execution_ids: Iterable[str], now_ms: int) -> None:
    """Record that these executions are confirmed in a worker queue."""
    ids = list(execution_ids)
    if ids:
        conn.execute(
            executions.update()
            .where(
                executions.c.execution_id.in_(ids),
                executions.c.status == ExecutionStatus.PENDING,
            )
            .values(status=ExecutionStatus.QUEUED, dispatched_at=now_ms)
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
    """Lock the still-unfinished executions among ``execution_ids``, with their job's data.

    The lock makes two result consumers that see the same result at once agree on
    which of them records it.
    """
    return list(
        conn.execute(
            sa.select(
                executions.c.execution_id,
                executions.c.job_id,
                executions.c.attempt,
                executions.c.trigger_time,
                jobs.c.app_id,
                jobs.c.cron_expr,
                jobs.c.callback_url,
            )
            .join(jobs, jobs.c.id == executions.c.job_id)
            .where(
                executions.c.execution_id.in_(list(execution_ids)),
                executions.c.status.in_([ExecutionStatus.PENDING, ExecutionStatus.QUEUED]),
            )
            .with_for_update(of=executions)
        ).all()
    )


def record_outcomes(conn: Connection, outcomes: Sequence[dict[str, Any]]) -> None:
    """Write final states; each dict holds execution_id, status, worker_id, message,
    result, started_at and ended_at."""
    if not outcomes:
        return
    conn.execute(
        executions.update()
        .where(executions.c.execution_id == sa.bindparam("b_execution_id"))
        .values(
            status=sa.bindparam("b_status"),
            worker_id=sa.bindparam("b_worker_id"),
            message=sa.bindparam("b_message"),
            result=sa.bindparam("b_result"),
            started_at=sa.bindparam("b_started_at"),
            ended_at=sa.bindparam("b_ended_at"),
        ),
        [{f"b_{k}": v for k, v in o.items()} for o in outcomes],
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
