"""Retention: delete finished executions and settled callback deliveries past an age.

Deletes go in small batches through the status indexes, so a sweep costs about the
same whatever the table size and never holds many locks at once.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.schema import callback_deliveries, executions
from common.states import DeliveryStatus, ExecutionStatus

FINISHED = (
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.LOST,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.SKIPPED,
    ExecutionStatus.CANCELLED,
)
SETTLED = (DeliveryStatus.DELIVERED, DeliveryStatus.DEAD)


def prune_executions(conn: Connection, before_ms: int, limit: int) -> int:
    """Delete up to ``limit`` finished executions scheduled before ``before_ms``."""
    deleted = 0
    for status in FINISHED:
        keys = list(
            conn.execute(
                sa.select(executions.c.id)
                .where(executions.c.status == status, executions.c.scheduled_at < before_ms)
                .limit(limit - deleted)
            ).scalars()
        )
        if keys:
            conn.execute(executions.delete().where(executions.c.id.in_(sorted(keys))))
            deleted += len(keys)
        if deleted >= limit:
            break
    return deleted


def prune_deliveries(conn: Connection, before_ms: int, limit: int) -> int:
    """Delete up to ``limit`` delivered or dead callback deliveries last touched before."""
    deleted = 0
    for status in SETTLED:
        keys = list(
            conn.execute(
                sa.select(callback_deliveries.c.id)
                .where(
                    callback_deliveries.c.status == status,
                    callback_deliveries.c.updated_at < before_ms,
                )
                .limit(limit - deleted)
            ).scalars()
        )
        if keys:
            conn.execute(
                callback_deliveries.delete().where(callback_deliveries.c.id.in_(sorted(keys)))
            )
            deleted += len(keys)
        if deleted >= limit:
            break
    return deleted
