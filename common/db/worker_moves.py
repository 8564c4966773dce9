"""Moving QUEUED executions off a worker (a dead one, one that drains, or one whose queue
holds more than it can start soon): lock the rows still on it, then point each at a
live worker or give it back to the firer.

The rows are locked first, in primary-key order, passing over those another
transaction holds; the moves that follow name rows this transaction already holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.schema import executions
from common.states import ExecutionStatus


def lock_queued_on(conn: Connection, execution_ids: Iterable[str], worker_id: str) -> set[str]:
    """Lock those of these executions still QUEUED on ``worker_id`` and return their ids;
    rows another transaction holds are passed over (a later pass takes them), so a
    paused process's open transaction keeps no caller waiting."""
    ids = sorted(execution_ids)
    if not ids:
        return set()
    rows = conn.execute(
        sa.select(executions.c.execution_id)
        .where(
            executions.c.execution_id.in_(ids),
            executions.c.worker_id == worker_id,
            executions.c.status == ExecutionStatus.QUEUED,
        )
        .order_by(executions.c.id)
        .with_for_update(skip_locked=True)
    ).scalars()
    return {str(r) for r in rows}


def _queued_on(execution_id: str, worker_id: str) -> sa.ColumnElement[bool]:
    """The row of ``execution_id`` while it is QUEUED on ``worker_id``."""
    return sa.and_(
        executions.c.execution_id == execution_id,
        executions.c.worker_id == worker_id,
        executions.c.status == ExecutionStatus.QUEUED,
    )


def reassign(
    conn: Connection, execution_id: str, from_worker: str, to_worker: str, now_ms: int
) -> bool:
    """Move a QUEUED execution from one worker to another; False if it is no longer
    QUEUED on ``from_worker`` (it ended, or another sweep moved it).

    The move is a dispatch of its own: ``dispatched_at`` becomes the time of the move, so
    the time it then waits in its new queue is counted from when it joined that queue.
    """
    result = conn.execute(
        executions.update()
        .where(_queued_on(execution_id, from_worker))
        .values(worker_id=to_worker, dispatched_at=now_ms)
    )
    return bool(result.rowcount)


def unassign(
    conn: Connection, execution_id: str, from_worker: str, message: str, now_ms: int
) -> bool:
    """Give a QUEUED execution of a dead worker back to the firer: SCHEDULED, due now, with
    why in its message; False if it is no longer QUEUED on ``from_worker``."""
    result = conn.execute(
        executions.update()
        .where(_queued_on(execution_id, from_worker))
        .values(
            status=ExecutionStatus.SCHEDULED,
            worker_id=None,
            dispatched_at=None,
            scheduled_at=now_ms,
            message=message,
        )
    )
    return bool(result.rowcount)


def recall(conn: Connection, execution_ids: Sequence[str], from_worker: str, message: str) -> int:
    """Give QUEUED executions back to the firer from a live worker's queue: SCHEDULED,
    with why in their message; how many were still QUEUED on ``from_worker``.

    Their due time stays (they were due, and keep their place in their app's order), and
    so does ``dispatched_at``: a SCHEDULED row that has one was recalled, and the firer
    lifts its started key's fence (``RECALLED``) before it sends it again.
    """
    if not execution_ids:
        return 0
    result = conn.execute(
        executions.update()
        .where(
            executions.c.execution_id.in_(sorted(execution_ids)),
            executions.c.worker_id == from_worker,
            executions.c.status == ExecutionStatus.QUEUED,
        )
        .values(status=ExecutionStatus.SCHEDULED, worker_id=None, message=message)
    )
    return int(result.rowcount)
