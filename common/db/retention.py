"""Retention: delete finished history past an age: executions, finished (or deleted)
jobs left with no history (settled callback deliveries go through
``DeliveryStore.prune_settled``, forgotten workers through
``WorkerStore.prune_forgotten``).

Deletes go in batches through indexes that lead with the status, so a batch costs
about the same whatever the table size; the caller sizes the batches.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.execution_logs import delete_for_executions
from common.db.job_dependencies import drop_edges_of
from common.db.schema import callback_deliveries, executions, jobs
from common.states import ExecutionStatus, JobStatus

FINISHED = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.LOST,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.SKIPPED,
    ExecutionStatus.CANCELLED,
)
# A deleted job is CANCELLED with ``deleted_at`` set: it goes with the cancelled ones.
ENDED_JOBS = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


def prune_executions(conn: Connection, before_ms: int, limit: int) -> int:
    """Delete up to ``limit`` finished executions scheduled before ``before_ms``, with
    their run logs."""
    deleted = 0
    for status in FINISHED:
        rows = conn.execute(
            sa.select(executions.c.id, executions.c.execution_id)
            .where(executions.c.status == status, executions.c.scheduled_at < before_ms)
            .limit(limit - deleted)
        ).all()
        if rows:
            # Their run logs go with them, in the same transaction.
            delete_for_executions(conn, [str(r.execution_id) for r in rows])
            keys = sorted(int(r.id) for r in rows)
            conn.execute(executions.delete().where(executions.c.id.in_(keys)))
            deleted += len(rows)
        if deleted >= limit:
            break
    return deleted


def prune_jobs(conn: Connection, before_ms: int, limit: int) -> int:
    """Delete up to ``limit`` jobs that ended (or were deleted) before ``before_ms`` and
    have no execution or callback delivery left (those go first, by their own age).

    Their ``clientRequestId`` goes with them: a create with it after this makes a new job.
    Their dependency edges go too, either way: a child whose parent is pruned no longer
    waits for it (its runs ended long ago, and were pruned before it).
    """
    has_history = sa.or_(
        sa.select(executions.c.id).where(executions.c.job_id == jobs.c.id).exists(),
        sa.select(callback_deliveries.c.id)
        .where(callback_deliveries.c.job_id == jobs.c.id)
        .exists(),
    )
    deleted = 0
    for status in ENDED_JOBS:
        keys = list(
            conn.execute(
                sa.select(jobs.c.id)
                .where(jobs.c.status == status, jobs.c.updated_at < before_ms, ~has_history)
                .limit(limit - deleted)
            ).scalars()
        )
        if keys:
            drop_edges_of(conn, keys)
            conn.execute(jobs.delete().where(jobs.c.id.in_(sorted(keys))))
            deleted += len(keys)
        if deleted >= limit:
            break
    return deleted
