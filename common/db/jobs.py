"""Jobs: create, read, find due ones, claim them by compare-and-set on version."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db import driver
from common.db.job_dependencies import After
from common.db.records import JobRecord
from common.db.schema import jobs
from common.documents import JsonObject, stored_text
from common.schedule import MisfirePolicy, OverlapPolicy
from common.states import JobStatus

DEFAULT_PRIORITY = 5
"""The priority of a job that names none (the column's default): the middle of 0-9."""

JobColumns: TypeAlias = dict[str, Any]
"""Column values to write into a jobs row, by column name; each value has its column's
type (``schema.jobs``)."""


@dataclass(frozen=True)
class JobPolicies:
    """Scheduling policies a job carries; defaults are the API's defaults."""

    timezone: str = "UTC"
    fixed_rate_seconds: int | None = None
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    misfire_threshold_seconds: int = 60
    catch_up_window_seconds: int = 3600
    overlap_policy: OverlapPolicy = OverlapPolicy.FORBID
    max_retries: int = 0
    retry_backoff_seconds: int = 10
    retry_backoff_max_seconds: int = 3600
    timeout_seconds: int | None = None
    jitter_seconds: int = 0

    def columns(self) -> JobColumns:
        """The policy columns of the jobs table."""
        return {
            "timezone": self.timezone,
            "fixed_rate_seconds": self.fixed_rate_seconds,
            "misfire_policy": str(self.misfire_policy),
            "misfire_threshold_seconds": self.misfire_threshold_seconds,
            "catch_up_window_seconds": self.catch_up_window_seconds,
            "overlap_policy": str(self.overlap_policy),
            "max_retries": self.max_retries,
            "retry_backoff_seconds": self.retry_backoff_seconds,
            "retry_backoff_max_seconds": self.retry_backoff_max_seconds,
            "timeout_seconds": self.timeout_seconds,
            "jitter_seconds": self.jitter_seconds,
        }


@dataclass(frozen=True)
class NewJob:
    """A validated job request, ready to insert."""

    app_pk: int
    job_name: str
    handler: str
    params: JsonObject
    cron_expr: str | None
    next_trigger_time: int
    callback_url: str | None
    client_request_id: str | None
    request_hash: str | None
    policies: JobPolicies = field(default_factory=JobPolicies)
    priority: int = DEFAULT_PRIORITY
    # A valid W3C traceparent (``common.tracing.traceparent``), or None.
    traceparent: str | None = None
    # The jobs whose runs this one's wait for (``job_dependencies``).
    after: tuple[After, ...] = ()


def _job_values(job: NewJob, now_ms: int, claim_token: str | None = None) -> JobColumns:
    """The column values of a new WAITING job."""
    return {
        "app_pk": job.app_pk,
        "job_name": job.job_name,
        "handler": job.handler,
        "params": stored_text(job.params),
        "cron_expr": job.cron_expr,
        "next_trigger_time": job.next_trigger_time,
        "status": JobStatus.WAITING.value,
        "version": 0,
        "callback_url": job.callback_url,
        "client_request_id": job.client_request_id,
        "request_hash": job.request_hash,
        "claim_token": claim_token,
        "created_at": now_ms,
        "updated_at": now_ms,
        "priority": job.priority,
        "traceparent": job.traceparent,
        "has_dependencies": bool(job.after),
        **job.policies.columns(),
    }


def insert_job(conn: Connection, job: NewJob, now_ms: int) -> int:
    """Insert a WAITING job and return its id.

    The values go as parameters of the one cached statement: ``insert().values(...)``
    would be compiled anew on every call.
    """
    result = conn.execute(jobs.insert(), _job_values(job, now_ms))
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def insert_jobs(conn: Connection, new_jobs: Sequence[NewJob], now_ms: int) -> list[int]:
    """Insert WAITING jobs with ONE multi-row INSERT; return their ids in the order given.

    How the ids are known: the statement's LAST_INSERT_ID() is the id of its first row.
    With ``innodb_autoinc_lock_mode`` 0 or 1 (1 is the MariaDB default, and what
    docker-compose's mariadb:10.11 runs) InnoDB reserves the ids of a "simple insert"
    (row count known up front, as here) in one go under its AUTO-INC lock, so the rows
    get ``first, first + step, ...`` with ``step = @@auto_increment_increment``:
    documented, and computed without another query. With mode 2 (interleaved, the
    MySQL 8 default) concurrent inserts may interleave, so the ids are not guaranteed
    consecutive: then every row carries a random per-batch marker in ``claim_token``
    (which only a claim sets, always to a fresh token), the ids are read back with
    ``id >= first AND claim_token = marker ORDER BY id`` (a short primary-key range:
    ids of one statement increase in row order), and the marker is cleared in the
    same transaction, so no other connection ever sees it. Both settings are read on
    this connection, so the choice follows the server actually used.
    """
    if not new_jobs:
        return []
    step = driver.consecutive_id_step(conn)
    marker = None if step is not None else secrets.token_hex(16)
    rows = [_job_values(job, now_ms, marker) for job in new_jobs]
    first = _insert_rows(conn, rows)
    if step is not None:
        return [first + index * step for index in range(len(rows))]
    assert marker is not None
    return _ids_by_marker(conn, first, marker, len(rows))


def _insert_rows(conn: Connection, rows: Sequence[JobColumns]) -> int:
    """One multi-row INSERT of ``rows`` (same keys) into jobs; the id of its first row.

    The statement is written here with the driver's ``%s`` placeholders, which the
    driver fills in one pass: ``insert().values(rows)`` is compiled anew for every
    batch, one bind parameter at a time, many times the CPU of this for a large batch.
    Drivers with another paramstyle take the compiled path.
    """
    if conn.dialect.paramstyle not in ("format", "pyformat"):
        return int(conn.execute(jobs.insert().values(list(rows))).lastrowid)
    columns = list(rows[0])
    quote = conn.dialect.identifier_preparer.quote
    row_sql = "(" + ", ".join(["%s"] * len(columns)) + ")"
    sql = (
        f"INSERT INTO {quote(jobs.name)} ({', '.join(quote(c) for c in columns)}) "
        f"VALUES {', '.join([row_sql] * len(rows))}"
    )
    params = tuple(row[column] for row in rows for column in columns)
    return int(conn.exec_driver_sql(sql, params).lastrowid)


def _ids_by_marker(conn: Connection, first: int, marker: str, expected: int) -> list[int]:
    """The ids of the rows this transaction inserted with ``marker``; the marker is cleared."""
    ids = list(
        conn.execute(
            sa.select(jobs.c.id)
            .where(jobs.c.id >= first, jobs.c.claim_token == marker)
            .order_by(jobs.c.id)
        ).scalars()
    )
    if len(ids) != expected:
        raise RuntimeError(f"inserted {expected} jobs but found {len(ids)} with their marker")
    conn.execute(jobs.update().where(jobs.c.id.in_(ids)).values(claim_token=None))
    return [int(i) for i in ids]


@dataclass(frozen=True, slots=True)
class KeyedJob:
    """A job stored under a clientRequestId: its id and the hash of the request that
    created it."""

    job_id: int
    request_hash: str | None


def keyed_jobs(conn: Connection, app_pk: int, keys: Sequence[str | None]) -> list[KeyedJob | None]:
    """Per clientRequestId (None: none given), the app's job stored under it, else None.

    One query finds them all; the column compares exactly (binary, NO PAD collation),
    so a stored id is found only by the same characters.
    """
    wanted = sorted({key for key in keys if key is not None})
    if not wanted:
        return [None] * len(keys)
    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.request_hash, jobs.c.client_request_id).where(
            jobs.c.app_pk == app_pk, jobs.c.client_request_id.in_(wanted)
        )
    ).all()
    found = {str(r.client_request_id): KeyedJob(int(r.id), r.request_hash) for r in rows}
    return [None if key is None else found.get(key) for key in keys]


def get_job(conn: Connection, app_pk: int, job_id: int) -> JobRecord | None:
    """One job of one app (deleted jobs are gone)."""
    row = conn.execute(
        sa.select(jobs).where(
            jobs.c.id == job_id, jobs.c.app_pk == app_pk, jobs.c.deleted_at.is_(None)
        )
    ).first()
    return JobRecord.from_row(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class TriggerSettings:
    """What recording an outcome needs of its job: app, kind, retries, callback URL."""

    id: int
    app_pk: int
    status: JobStatus
    recurring: bool
    has_next_trigger: bool
    callback_url: str | None
    max_retries: int
    retry_backoff_seconds: int
    retry_backoff_max_seconds: int
    # The app's public id (``app_...``), for the per-app metrics.
    app_id: str = ""
    # Some job waits for this one's runs (``jobs.has_children``).
    has_children: bool = False
    # Its runs wait for other jobs' (``jobs.has_dependencies``), and when it was made:
    # what finds the parent runs a run waited for (``common.dependencies``).
    has_dependencies: bool = False
    created_at: int = 0


def trigger_settings(conn: Connection, job_ids: Iterable[int]) -> dict[int, TriggerSettings]:
    """What the results consumer needs of each job: app, schedule, retries (no more than
    its app's ``max_retries`` limit), callback URL."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    rows = driver.fetch(
        conn,
        "SELECT j.id, j.app_pk, j.status, j.cron_expr, j.fixed_rate_seconds, "
        "j.next_trigger_time, j.callback_url, "
        # An app's retry limit lowered after the job was stored binds its runs too.
        "LEAST(j.max_retries, a.max_retries) AS max_retries, j.retry_backoff_seconds, "
        "j.retry_backoff_max_seconds, a.app_id, j.has_children, j.has_dependencies, "
        "j.created_at "
        "FROM jobs j JOIN apps a ON a.id = j.app_pk "
        f"WHERE j.id IN ({driver.ints(ids)})",
    )
    return {
        int(r.id): TriggerSettings(
            int(r.id),
            int(r.app_pk),
            JobStatus(r.status),
            r.cron_expr is not None or r.fixed_rate_seconds is not None,
            r.next_trigger_time is not None,
            r.callback_url,
            int(r.max_retries),
            int(r.retry_backoff_seconds),
            int(r.retry_backoff_max_seconds),
            str(r.app_id),
            bool(r.has_children),
            bool(r.has_dependencies),
            int(r.created_at),
        )
        for r in rows
    }


def end_triggers(
    conn: Connection, job_ids: Iterable[int], final: JobStatus | None, now_ms: int
) -> None:
    """Triggers of these jobs ended: release held jobs, in one statement.

    One-shot jobs (``final`` given) take that end state unless they were cancelled;
    recurring jobs held by the QUEUE overlap policy go back to WAITING. A job paused or
    cancelled meanwhile keeps that state.
    """
    ids = sorted(set(job_ids))
    if not ids:
        return
    if final is not None:
        running, paused = JobStatus.RUNNING.value, JobStatus.PAUSED.value
        status_sql = "IF(status IN (%s, %s), %s, status)"
        status_params: tuple[str, ...] = (running, paused, final.value)
    else:
        status_sql = "IF(status = %s, %s, status)"
        status_params = (JobStatus.RUNNING.value, JobStatus.WAITING.value)
    driver.execute(
        conn,
        f"UPDATE jobs SET status = {status_sql}, version = version + 1, updated_at = %s "
        f"WHERE id IN ({driver.ints(ids)})",
        (*status_params, now_ms),
    )


def release_jobs(
    conn: Connection, ends: Iterable[tuple[int, JobStatus | None]], now_ms: int
) -> None:
    """Release the jobs of ended triggers, one statement per kind of end (see
    ``end_triggers``): each pair is a job id and its final status (None: recurring)."""
    groups: dict[JobStatus | None, list[int]] = {}
    for job_id, final in ends:
        groups.setdefault(final, []).append(job_id)
    for final, job_ids in groups.items():
        end_triggers(conn, job_ids, final, now_ms)


def lock_free_jobs(conn: Connection, job_ids: Iterable[int]) -> set[int]:
    """Lock these jobs' rows, passing over those another transaction holds (an open
    claim, perhaps of a paused dispatcher); the ids of those locked."""
    ids = sorted(set(job_ids))
    if not ids:
        return set()
    rows = driver.fetch(
        conn,
        f"SELECT id FROM jobs WHERE id IN ({driver.ints(ids)}) ORDER BY id FOR UPDATE SKIP LOCKED",
    )
    return {int(r.id) for r in rows}
