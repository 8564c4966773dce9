"""Job control in the database: pause, resume, cancel, soft delete, edit, trigger, list.

Every state change is a compare-and-set: one UPDATE names the job, its app, the statuses
the change is allowed from and ``deleted_at IS NULL``, and bumps ``version`` (so that a
dispatcher holding an older read of the job loses its claim). No row changed means the
job is gone or in another status; the caller re-reads to tell which.

Lock order, shared with the dispatcher: executions are locked only by primary key,
ascending (see ``common.db.executions``), and before the job row when a transaction
needs both, as the results consumer does. A transaction that locks the job row first
(resume, trigger, edit) locks no existing execution after it.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from common.db.executions import (
    NewExecution,
    insert_executions,
    jobs_with_own_runs,
    triggers_with_executions,
)
from common.db.jobs import JobColumns
from common.db.records import ExecutionRecord, JobRecord
from common.db.retry import is_duplicate_key
from common.db.schema import executions, jobs
from common.errors import TriggerBusyError
from common.execution_ids import trigger_execution_id
from common.schedule import PAUSED_SKIP
from common.states import ExecutionStatus, JobStatus
from common.timefmt import iso_ms
from common.tracing.traceparent import fresh_parent

ACTIVE = (JobStatus.WAITING, JobStatus.RUNNING, JobStatus.PAUSED)
"""The statuses a job can still fire from (by schedule or by a held run)."""

SAME_MS_TRIES = 3


@dataclass(frozen=True)
class JobFilter:
    """What a job list is narrowed to; None means any."""

    status: JobStatus | None = None
    handler: str | None = None
    name_prefix: str | None = None


def _alive(app_pk: int, job_id: int) -> sa.ColumnElement[bool]:
    return sa.and_(jobs.c.id == job_id, jobs.c.app_pk == app_pk, jobs.c.deleted_at.is_(None))


def job_status(conn: Connection, app_pk: int, job_id: int) -> JobStatus | None:
    """The stored status of one job of one app, read without locking; None when gone."""
    value = conn.execute(sa.select(jobs.c.status).where(_alive(app_pk, job_id))).scalar()
    return JobStatus(value) if value is not None else None


def lock_job(conn: Connection, app_pk: int, job_id: int) -> JobRecord | None:
    """Lock one job row of one app (deleted jobs are gone) and return it."""
    row = conn.execute(sa.select(jobs).where(_alive(app_pk, job_id)).with_for_update()).first()
    return JobRecord.from_row(row) if row is not None else None


def set_status(
    conn: Connection,
    app_pk: int,
    job_id: int,
    allowed: Collection[JobStatus],
    target: JobStatus,
    now_ms: int,
    **values: int | None,
) -> bool:
    """Move the job to ``target`` if its status is one of ``allowed``; True if it moved.

    ``values`` are further columns to set in the same UPDATE (``deleted_at``,
    ``next_trigger_time``).
    """
    return update_job(conn, app_pk, job_id, allowed, {"status": target, **values}, now_ms)


def update_job(
    conn: Connection,
    app_pk: int,
    job_id: int,
    allowed: Collection[JobStatus],
    values: JobColumns,
    now_ms: int,
) -> bool:
    """Set ``values`` on the job if its status is one of ``allowed``; True if it changed."""
    result = conn.execute(
        jobs.update()
        .where(_alive(app_pk, job_id), jobs.c.status.in_([str(s) for s in allowed]))
        .values(**values, version=jobs.c.version + 1, updated_at=now_ms)
    )
    return result.rowcount == 1


def has_own_run(conn: Connection, job_id: int) -> bool:
    """True when a scheduled (not manual) trigger of the job has not ended yet.

    Only such a run holds a job RUNNING: the results consumer releases the job when it
    ends, and never for a manual run. Read without locking.
    """
    return bool(jobs_with_own_runs(conn, [job_id]))


def _scheduled_keys(conn: Connection, job_id: int) -> list[int]:
    """Primary keys of the job's SCHEDULED executions, read without locking."""
    return sorted(
        conn.execute(
            sa.select(executions.c.id).where(
                executions.c.job_id == job_id,
                executions.c.status == ExecutionStatus.SCHEDULED,
            )
        ).scalars()
    )


def _lock_still_scheduled(conn: Connection, keys: Sequence[int]) -> list[int]:
    """Lock these executions by primary key, ascending; return those still SCHEDULED."""
    if not keys:
        return []
    rows = conn.execute(
        sa.select(executions.c.id, executions.c.status)
        .where(executions.c.id.in_(sorted(keys)))
        .order_by(executions.c.id)
        .with_for_update()
    ).all()
    return [int(r.id) for r in rows if r.status == ExecutionStatus.SCHEDULED]


def _cancel_executions(conn: Connection, keys: Sequence[int], now_ms: int) -> None:
    if keys:
        conn.execute(
            executions.update()
            .where(executions.c.id.in_(sorted(keys)))
            .values(
                status=ExecutionStatus.CANCELLED,
                message="cancelled before it was sent to a worker",
                ended_at=now_ms,
            )
        )


def cancel_job(
    conn: Connection,
    app_pk: int,
    job_id: int,
    allowed: Collection[JobStatus],
    now_ms: int,
    delete: bool = False,
) -> int | None:
    """Cancel (or soft delete) the job and its SCHEDULED executions in one transaction.

    Returns how many executions were cancelled, or None when the job was not in an
    ``allowed`` status (nothing changed). QUEUED executions go on; their results are
    still recorded and leave the job CANCELLED. The job's SCHEDULED executions are
    locked before its row, in the results consumer's order; any created between that
    read and the job UPDATE (a claim that committed meanwhile) is found by a second
    read, after which the job row lock keeps new ones out.
    """
    locked = _lock_still_scheduled(conn, _scheduled_keys(conn, job_id))
    values = {"deleted_at": now_ms} if delete else {}
    if not set_status(conn, app_pk, job_id, allowed, JobStatus.CANCELLED, now_ms, **values):
        return None
    seen = set(locked)
    late = [k for k in _scheduled_keys(conn, job_id) if k not in seen]
    cancelled = locked + _lock_still_scheduled(conn, late)
    _cancel_executions(conn, cancelled, now_ms)
    return len(cancelled)


def _first_free_trigger_time(conn: Connection, job: JobRecord, now_ms: int) -> int:
    """Now, or the millisecond after the latest trigger time the job's executions hold
    from now on; never the job's own next trigger time, which its claim will take."""
    latest = conn.execute(
        sa.select(sa.func.max(executions.c.trigger_time)).where(
            executions.c.job_id == job.id, executions.c.trigger_time >= now_ms
        )
    ).scalar()
    candidate = now_ms if latest is None else max(now_ms, int(latest) + 1)
    return candidate + 1 if candidate == job.next_trigger_time else candidate


def insert_manual_execution(
    conn: Connection,
    job: JobRecord,
    now_ms: int,
    params: str | None = None,
    traceparent: str | None = None,
) -> NewExecution:
    """Insert a SCHEDULED manual execution of the locked ``job``, due now; return it.
    ``params``: JSON text of params for this run only, in place of the job's.

    The run carries ``traceparent`` (the trigger's own, or a branch of the job's trace
    the caller made), else the job's trace id under a fresh parent id, else none.

    The unique key (job, trigger time, attempt) gives every trigger time one first
    attempt, so a manual run takes the first free trigger time from now on: triggers of
    one job in the same millisecond get now, now + 1, now + 2, ... The caller holds the
    job row lock, which orders manual triggers and claims of the job, so the time read is
    still free when it is inserted; should a row take it all the same, the next free
    time is read again (each try in a savepoint, so the transaction stays usable).
    """
    trace = traceparent or (fresh_parent(job.traceparent) if job.traceparent else None)
    for _ in range(SAME_MS_TRIES):
        trigger_time = _first_free_trigger_time(conn, job, now_ms)
        execution = NewExecution(
            str(uuid.uuid4()),
            job.id,
            1,
            trigger_time,
            now_ms,
            manual=True,
            params=params,
            traceparent=trace,
        )
        try:
            with conn.begin_nested():
                insert_executions(conn, [execution], now_ms)
        except IntegrityError as e:
            if not is_duplicate_key(e):
                raise
            continue
        return execution
    raise TriggerBusyError(job.id)


def list_query(app_pk: int, where: JobFilter, before_id: int | None, limit: int) -> sa.Select[Any]:
    """The query behind ``list_jobs``: newest first through ix_jobs_app_pk_id."""
    query = (
        sa.select(jobs)
        .with_hint(jobs, "FORCE INDEX (ix_jobs_app_pk_id)", "mysql")
        .where(jobs.c.app_pk == app_pk, jobs.c.deleted_at.is_(None))
        .order_by(jobs.c.id.desc())
        .limit(limit)
    )
    if before_id is not None:
        query = query.where(jobs.c.id < before_id)
    if where.status is not None:
        query = query.where(jobs.c.status == where.status)
    if where.handler is not None:
        query = query.where(jobs.c.handler == where.handler)
    if where.name_prefix:
        query = query.where(jobs.c.job_name.startswith(where.name_prefix, autoescape=True))
    return query


def list_jobs(
    conn: Connection, app_pk: int, where: JobFilter, before_id: int | None, limit: int
) -> list[JobRecord]:
    """Up to ``limit`` of the app's live jobs with an id below ``before_id``, newest first.

    ``status`` matches the stored status; ``name_prefix`` is a LIKE prefix with % and _
    taken literally (case follows the column's collation, insensitive by default).
    """
    rows = conn.execute(list_query(app_pk, where, before_id, limit))
    return [JobRecord.from_row(r) for r in rows]


def last_executions(conn: Connection, job_ids: Sequence[int]) -> dict[int, ExecutionRecord]:
    """The newest execution of each job (as ``list_for_job`` orders them), in one query.

    Each job's newest row is found by a correlated LIMIT 1 over the unique key
    (job_id, trigger_time, attempt), so the cost does not grow with a job's history.
    """
    if not job_ids:
        return {}
    newer = executions.alias("newer")
    newest = (
        sa.select(newer.c.id)
        .where(newer.c.job_id == jobs.c.id)
        .order_by(newer.c.trigger_time.desc(), newer.c.attempt.desc())
        .limit(1)
        .correlate(jobs)
        .scalar_subquery()
    )
    rows = conn.execute(
        sa.select(executions)
        .select_from(jobs.join(executions, executions.c.id == newest))
        .where(jobs.c.id.in_(sorted(set(job_ids))))
    )
    return {e.job_id: e for e in map(ExecutionRecord.from_row, rows)}


def skip_paused_triggers(
    conn: Connection, job: JobRecord, triggers: Sequence[int], more: bool, now_ms: int
) -> None:
    """Record the triggers the locked ``job`` missed while paused as SKIPPED executions
    (under the ids a claim would have given them); ``more``: it missed more than these,
    up to ``now_ms``, which the last row's message says."""
    taken = triggers_with_executions(conn, [(job.id, t, 1) for t in triggers])
    rows = [
        NewExecution(
            trigger_execution_id(job.id, job.created_at, t),
            job.id,
            1,
            t,
            t,
            status=ExecutionStatus.SKIPPED,
            message=PAUSED_SKIP,
        )
        for t in triggers
        if (job.id, t, 1) not in taken
    ]
    if rows and more:
        last = rows[-1]
        note = f"{PAUSED_SKIP}; the later triggers until the resume at {iso_ms(now_ms)} too"
        rows[-1] = NewExecution(
            last.execution_id,
            last.job_id,
            1,
            last.trigger_time,
            last.scheduled_at,
            status=ExecutionStatus.SKIPPED,
            message=note,
        )
    insert_executions(conn, rows, now_ms)
