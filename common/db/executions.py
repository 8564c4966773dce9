"""Executions: one row per attempt at one trigger, the history the API shows.

Every transaction that changes executions locks them by primary key in ascending order
and names only the primary key in its WHERE clause, so the dispatcher and the results
consumer never wait on each other in a circle (a status predicate could make the
optimizer walk the status index first, which is the opposite lock order).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import index
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db import driver
from common.db.records import ExecutionRecord
from common.db.schema import executions
from common.states import ExecutionStatus

UNFINISHED = (ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED)


@dataclass(frozen=True)
class NewExecution:
    """An execution to create: SCHEDULED to fire at ``scheduled_at``, QUEUED on
    ``worker_id`` (sent as it is created), or already final."""

    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    scheduled_at: int
    status: ExecutionStatus = ExecutionStatus.SCHEDULED
    message: str | None = None
    manual: bool = False
    worker_id: str | None = None
    # JSON text of the params a trigger with params gave this run; None: the job's.
    params: str | None = None
    # The W3C traceparent the run carries (``common.tracing.traceparent``), or None.
    traceparent: str | None = None
    backfill: bool = False

    def queued_on(self, worker_id: str) -> NewExecution:
        """This execution written QUEUED on a worker (built directly: ``dataclasses.replace``
        is slower, on the claim's path)."""
        return NewExecution(
            self.execution_id,
            self.job_id,
            self.attempt,
            self.trigger_time,
            self.scheduled_at,
            ExecutionStatus.QUEUED,
            self.message,
            self.manual,
            worker_id,
            self.params,
            self.traceparent,
            self.backfill,
        )


_EXECUTION_COLUMNS = (
    "execution_id, job_id, attempt, trigger_time, scheduled_at, status, message, manual, "
    "backfill, worker_id, created_at, dispatched_at, ended_at, params, traceparent"
)


def insert_executions(conn: Connection, rows: Sequence[NewExecution], now_ms: int) -> None:
    """Insert executions in one multi-row statement.

    The unique key (job_id, trigger_time, attempt) makes the database refuse a second
    execution of the same trigger, whatever a dispatcher believes.
    """
    if rows:
        _insert(conn, rows, now_ms)


def insert_executions_with_ids(
    conn: Connection, rows: Sequence[NewExecution], now_ms: int
) -> list[int]:
    """``insert_executions``, returning the rows' primary keys in the order given.

    The keys follow from the statement's first id when the server hands out
    consecutive ids (``driver.consecutive_id_step``); otherwise they are read back by
    execution id in the same transaction.
    """
    if not rows:
        return []
    first = _insert(conn, rows, now_ms)
    step = driver.consecutive_id_step(conn)
    if step is not None:
        return [first + index * step for index in range(len(rows))]
    wanted = [r.execution_id for r in rows]
    found = driver.fetch(
        conn,
        f"SELECT id, execution_id FROM executions WHERE execution_id IN "
        f"({driver.marks(len(wanted))})",
        wanted,
    )
    keys = {str(r.execution_id): int(r.id) for r in found}
    return [keys[execution_id] for execution_id in wanted]


def insert_missing_executions(conn: Connection, rows: Sequence[NewExecution], now_ms: int) -> int:
    """Insert those of ``rows`` whose execution id (or trigger slot) no row holds yet, in
    one multi-row ``INSERT IGNORE``; returns how many were inserted.

    Rows with derived ids (``common.execution_ids``) are then created once however many
    transactions insert them at the same time: the unique keys settle it, not a read.
    """
    if not rows:
        return 0
    sql, params = _values(rows, now_ms)
    return driver.execute(conn, f"INSERT IGNORE INTO executions {sql}", params)


def _insert(conn: Connection, rows: Sequence[NewExecution], now_ms: int) -> int:
    """One multi-row INSERT; the id of its first row."""
    sql, params = _values(rows, now_ms)
    return driver.insert(conn, f"INSERT INTO executions {sql}", params)


def _values(rows: Sequence[NewExecution], now_ms: int) -> tuple[str, list[Any]]:
    """The ``(columns) VALUES (...), ...`` of an INSERT of ``rows``, and its parameters."""
    # Integers go into the SQL text (see ``driver.ints``); strings are parameters.
    params: list[Any] = []
    values: list[str] = []
    now = index(now_ms)
    for r in rows:
        ended = "NULL" if r.status in UNFINISHED else now
        dispatched = now if r.status is ExecutionStatus.QUEUED else "NULL"
        # A run's own params and a traceparent are rare (a trigger with params, a traced
        # job): the rest send no parameter, which the driver would escape one by one.
        own = "NULL" if r.params is None else "%s"
        trace = "NULL" if r.traceparent is None else "%s"
        values.append(
            f"(%s, {index(r.job_id)}, {index(r.attempt)}, {index(r.trigger_time)}, "
            f"{index(r.scheduled_at)}, %s, %s, {index(r.manual)}, {index(r.backfill)}, %s, {now}, "
            f"{dispatched}, {ended}, {own}, {trace})"
        )
        params += (r.execution_id, r.status.value, r.message, r.worker_id)
        if r.params is not None:
            params.append(r.params)
        if r.traceparent is not None:
            params.append(r.traceparent)
    return f"({_EXECUTION_COLUMNS}) VALUES {', '.join(values)}", params


def primary_keys(conn: Connection, execution_ids: Iterable[str]) -> list[int]:
    """The primary keys of these executions, ascending, read without locking."""
    ids = list(execution_ids)
    if not ids:
        return []
    return sorted(
        conn.execute(sa.select(executions.c.id).where(executions.c.execution_id.in_(ids))).scalars()
    )


def lock_still_scheduled(
    conn: Connection, keys: Iterable[int], skip_locked: bool = False
) -> set[int]:
    """Lock these executions (by primary key) and return those still SCHEDULED; with
    ``skip_locked``, those another transaction holds are passed over."""
    ordered = sorted(keys)
    if not ordered:
        return set()
    rows = driver.fetch(
        conn,
        f"SELECT id, status FROM executions WHERE id IN ({driver.ints(ordered)}) "
        "ORDER BY id FOR UPDATE" + (" SKIP LOCKED" if skip_locked else ""),
    )
    return {int(r.id) for r in rows if r.status == ExecutionStatus.SCHEDULED}


def mark_queued(conn: Connection, workers: Mapping[int, str], now_ms: int) -> None:
    """Record that these executions (primary key -> worker id) are in worker queues.

    Only SCHEDULED rows change: a result may have been recorded already. One UPDATE per
    worker keeps every SET a constant: a CASE over hundreds of ids costs the database a
    comparison per id per row.
    MySQL applies SET left to right: each column reads status before status changes.
    """
    by_worker: dict[str, list[int]] = {}
    for key, worker_id in workers.items():
        by_worker.setdefault(worker_id, []).append(key)
    scheduled = ExecutionStatus.SCHEDULED.value
    for worker_id in sorted(by_worker):
        keys = sorted(by_worker[worker_id])
        driver.execute(
            conn,
            "UPDATE executions SET "
            "dispatched_at = IF(status = %s, %s, dispatched_at), "
            "worker_id = IF(status = %s, %s, worker_id), "
            "message = IF(status = %s, NULL, message), "
            "status = IF(status = %s, %s, status) "
            f"WHERE id IN ({driver.ints(keys)})",
            (
                scheduled,
                now_ms,
                scheduled,
                worker_id,
                scheduled,
                scheduled,
                ExecutionStatus.QUEUED.value,
            ),
        )


def hold_scheduled(conn: Connection, reasons: Mapping[int, str], until_ms: int) -> None:
    """Leave SCHEDULED executions (locked by the caller) for ``until_ms``, each with why it
    waits in its message; the executions due before then are loaded meanwhile."""
    keys = sorted(reasons)
    if keys:
        conn.execute(
            executions.update()
            .where(executions.c.id.in_(keys))
            .values(scheduled_at=until_ms, message=sa.case(dict(reasons), value=executions.c.id))
        )


def unmark_queued(conn: Connection, keys: Iterable[int]) -> None:
    """Put executions this transaction marked QUEUED back to SCHEDULED (not sent after all)."""
    ordered = sorted(keys)
    if ordered:
        driver.execute(
            conn,
            "UPDATE executions SET status = %s, worker_id = NULL, dispatched_at = NULL "
            f"WHERE id IN ({driver.ints(ordered)})",
            (ExecutionStatus.SCHEDULED.value,),
        )


_BY_JOB = "uq_executions_trigger_attempt"
_BY_STATUS = "ix_executions_status_scheduled"


def jobs_with_runs(
    conn: Connection,
    job_ids: Iterable[int],
    statuses: Sequence[ExecutionStatus] = (ExecutionStatus.QUEUED,),
    own_only: bool = False,
) -> set[int]:
    """Which of these jobs have an execution in a worker queue or running now (or, with
    ``statuses``, in any of those states; with ``own_only``, not a manual one)."""
    ids = sorted(set(job_ids))
    if not ids:
        return set()
    own = " AND manual = 0" if own_only else ""
    # A claim asks about its whole batch (a thousand jobs): against a table of a few
    # thousand rows MariaDB estimated that many index lookups dearer than reading every
    # row, and scanned the table on every claim. Either index bounds the read: the
    # batch's jobs' runs, or the runs not ended yet; MariaDB picks the cheaper.
    rows = driver.fetch(
        conn,
        "SELECT DISTINCT job_id FROM executions "
        f"FORCE INDEX ({_BY_JOB}, {_BY_STATUS}) WHERE job_id IN ({driver.ints(ids)}) "
        f"AND status IN ({driver.marks(len(statuses))}){own}",
        [s.value for s in statuses],
    )
    return {int(r.job_id) for r in rows}


def jobs_with_own_runs(conn: Connection, job_ids: Iterable[int]) -> set[int]:
    """Which of these jobs have a scheduled (not manual) trigger not ended yet: only
    such a run can hold its job RUNNING (a manual run never does)."""
    return jobs_with_runs(conn, job_ids, UNFINISHED, own_only=True)


def triggers_with_executions(
    conn: Connection, triggers: Sequence[tuple[int, int, int]]
) -> set[tuple[int, int, int]]:
    """Which of these (job id, trigger time, attempt) already have a scheduled (not
    manual) execution row: a manual run at the same time takes a slot of its own."""
    if not triggers:
        return set()
    keys = ", ".join(f"({index(j)}, {index(t)}, {index(a)})" for j, t, a in triggers)
    rows = driver.fetch(
        conn,
        "SELECT job_id, trigger_time, attempt FROM executions "
        f"WHERE (job_id, trigger_time, attempt) IN ({keys}) AND manual = 0",
    )
    return {(int(r.job_id), int(r.trigger_time), int(r.attempt)) for r in rows}


def mark_skipped(
    conn: Connection,
    reasons: Mapping[int, str],
    now_ms: int,
    status: ExecutionStatus = ExecutionStatus.SKIPPED,
) -> None:
    """End SCHEDULED executions without running them (SKIPPED or CANCELLED), with reasons."""
    keys = sorted(reasons)
    if keys:
        conn.execute(
            executions.update()
            .where(executions.c.id.in_(keys))
            .values(
                status=status,
                message=sa.case(dict(reasons), value=executions.c.id),
                ended_at=now_ms,
            )
        )


@dataclass(frozen=True, slots=True)
class LockedExecution:
    """An execution locked for recording its outcome."""

    id: int
    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    status: ExecutionStatus
    manual: bool
    # The run's own params (a trigger with params), which its retry carries on; None: the job's.
    params: str | None = None
    traceparent: str | None = None
    backfill: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a locked execution ended, as ``record_outcomes`` writes it over its row."""

    execution: LockedExecution
    status: ExecutionStatus
    worker_id: str
    message: str | None
    result: str | None
    started_at: int | None
    ended_at: int | None


def lock_unfinished(conn: Connection, refs: Mapping[str, int | None]) -> list[LockedExecution]:
    """Lock executions by primary key, ascending, and return the unfinished ones.

    ``refs`` maps each execution id to the primary key its result carries, or None; ids
    without one are looked up first. A key can be stale: a claim that sent its
    executions and then rolled back left messages whose keys no row has; the same
    executions, claimed again under the same ids, have other keys. Those are locked by
    execution id after the rest, with a locking read, which waits for a claim still
    open with them (a plain read would miss its rows and drop the result). Two result
    consumers that see the same result agree on which of them records it.
    """
    known = {key for key in refs.values() if key is not None}
    keys = sorted(known | set(primary_keys(conn, [e for e, k in refs.items() if k is None])))
    rows = _lock(conn, f"id IN ({driver.ints(keys)})", ()) if keys else []
    found = {str(r.execution_id) for r in rows}
    stale = [e for e, key in refs.items() if key is not None and e not in found]
    if stale:
        rows += _lock(conn, f"execution_id IN ({driver.marks(len(stale))})", stale)
    return [r for r in rows if r.status in UNFINISHED]


def _lock(conn: Connection, where: str, params: Sequence[Any]) -> list[LockedExecution]:
    rows = driver.fetch(
        conn,
        "SELECT id, execution_id, job_id, attempt, trigger_time, status, manual, backfill, "
        "params, traceparent "
        f"FROM executions WHERE {where} ORDER BY id FOR UPDATE",
        params,
    )
    return [
        LockedExecution(
            int(r.id),
            str(r.execution_id),
            int(r.job_id),
            int(r.attempt),
            int(r.trigger_time),
            ExecutionStatus(r.status),
            bool(r.manual),
            None if r.params is None else str(r.params),
            r.traceparent,
            bool(r.backfill),
        )
        for r in rows
    ]


_OUTCOME_COLUMNS = (
    "id, execution_id, job_id, attempt, trigger_time, status, worker_id, message, result, "
    "started_at, ended_at, created_at"
)


def record_outcomes(conn: Connection, outcomes: Sequence[Outcome]) -> None:
    """Write final states in one multi-row statement.

    Each outcome names its row by the identity ``lock_unfinished`` returned (already
    locked). The rows exist, so the INSERT ... ON DUPLICATE KEY UPDATE only ever
    updates; it does in one round trip what one UPDATE per row would do in hundreds.
    """
    if not outcomes:
        return
    # Integers go into the SQL text (see ``driver.ints``); strings are parameters.
    params: list[str | None] = []
    values: list[str] = []
    for o in sorted(outcomes, key=lambda o: o.execution.id):
        e = o.execution
        values.append(
            f"({index(e.id)}, %s, {index(e.job_id)}, {index(e.attempt)}, "
            f"{index(e.trigger_time)}, %s, %s, %s, %s, {driver.int_or_null(o.started_at)}, "
            f"{driver.int_or_null(o.ended_at)}, 0)"
        )
        params += (e.execution_id, o.status, o.worker_id, o.message, o.result)
    updated = ("status", "worker_id", "message", "result", "started_at", "ended_at")
    driver.execute(
        conn,
        f"INSERT INTO executions ({_OUTCOME_COLUMNS}) VALUES {', '.join(values)} "
        "ON DUPLICATE KEY UPDATE " + ", ".join(f"{c} = VALUES({c})" for c in updated),
        params,
    )


def list_for_job(conn: Connection, job_id: int, limit: int) -> list[ExecutionRecord]:
    """A job's executions, newest first."""
    rows = conn.execute(
        sa.select(executions)
        .where(executions.c.job_id == job_id)
        .order_by(executions.c.trigger_time.desc(), executions.c.attempt.desc())
        .limit(limit)
    )
    return [ExecutionRecord.from_row(r) for r in rows]
