"""Backfill runs in the database: the missing executions of past trigger times.

Each run takes the execution id the claim would have given its trigger
(``common.execution_ids``), so a time that already has an execution (run by the
schedule, skipped in a pause, or backfilled before) keeps it, and backfills that
overlap create each time once: ``INSERT IGNORE`` on the unique execution id settles
a race the read before it did not see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.db import driver
from common.db.executions import NewExecution, insert_missing_executions
from common.db.records import JobRecord
from common.execution_ids import trigger_execution_id

# Rows per statement: multi-row statements, never one per row.
CHUNK = 500


@dataclass(frozen=True)
class BackfillCount:
    """What a backfill did: executions it created, and times that had one already."""

    created: int
    existing: int


def backfill_execution(job: JobRecord, trigger_time: int, now_ms: int) -> NewExecution:
    """The SCHEDULED backfill run of ``job`` at a past ``trigger_time``, due now."""
    execution_id = trigger_execution_id(job.id, job.created_at, trigger_time)
    return NewExecution(execution_id, job.id, 1, trigger_time, now_ms, manual=True, backfill=True)


def _taken(conn: Connection, execution_ids: Sequence[str]) -> set[str]:
    """Which of these execution ids some row holds, read without locking."""
    found = driver.fetch(
        conn,
        "SELECT execution_id FROM executions WHERE execution_id IN "
        f"({driver.marks(len(execution_ids))})",
        execution_ids,
    )
    return {str(r.execution_id) for r in found}


def missing_backfill_runs(
    conn: Connection, job: JobRecord, times: Sequence[int], now_ms: int
) -> list[NewExecution]:
    """The backfill runs of ``job`` at ``times`` that no execution holds yet, read
    without locking (so the insert after meets no existing row, and locks none after
    the job row, as ``common.db.job_control`` orders locks)."""
    missing: list[NewExecution] = []
    for start in range(0, len(times), CHUNK):
        rows = [backfill_execution(job, t, now_ms) for t in times[start : start + CHUNK]]
        taken = _taken(conn, [r.execution_id for r in rows])
        missing.extend(r for r in rows if r.execution_id not in taken)
    return missing


def insert_backfill(
    conn: Connection,
    job: JobRecord,
    times: Sequence[int],
    now_ms: int,
    before_insert: Callable[[int], None] | None = None,
) -> BackfillCount:
    """Create the backfill runs of the locked ``job`` at ``times`` that have no
    execution yet; count what was created and what existed.

    ``before_insert(n)`` hears how many runs are about to be created before any is
    written (the API charges them to the app's rate limit); what it raises writes
    nothing. ``INSERT IGNORE`` covers what was created meanwhile.
    """
    missing = missing_backfill_runs(conn, job, times, now_ms)
    if before_insert is not None:
        before_insert(len(missing))
    created = 0
    for start in range(0, len(missing), CHUNK):
        created += insert_missing_executions(conn, missing[start : start + CHUNK], now_ms)
    return BackfillCount(created, len(times) - created)
