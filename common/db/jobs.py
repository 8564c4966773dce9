"""Jobs: create, read, find due ones, claim them by compare-and-set on version."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.rows import AnyRow
from common.db.schema import jobs
from common.states import JobStatus


@dataclass(frozen=True)
class NewJob:
    """A validated job request, ready to insert."""

    app_pk: int
    job_name: str
    handler: str
    params: dict[str, Any]
    cron_expr: str | None
    next_trigger_time: int
    callback_url: str | None
    client_request_id: str | None
    request_hash: str | None


@dataclass(frozen=True)
class DueJob:
    """A job whose trigger time has come, as read by the due scan."""

    id: int
    version: int
    handler: str
    params: str
    trigger_time: int


def insert_job(conn: Connection, job: NewJob, now_ms: int) -> int:
    """Insert a WAITING job and return its id."""
    result = conn.execute(
        jobs.insert().values(
            app_id=job.app_pk,
            job_name=job.job_name,
            handler=job.handler,
            params=json.dumps(job.params, separators=(",", ":")),
            cron_expr=job.cron_expr,
            next_trigger_time=job.next_trigger_time,
            status=JobStatus.WAITING,
            version=0,
            callback_url=job.callback_url,
            client_request_id=job.client_request_id,
            request_hash=job.request_hash,
            created_at=now_ms,
            updated_at=now_ms,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def find_by_client_request(conn: Connection, app_pk: int, client_request_id: str) -> AnyRow | None:
    """The job an app created earlier with this clientRequestId, if any."""
    return conn.execute(
        sa.select(jobs.c.id, jobs.c.status, jobs.c.request_hash).where(
            jobs.c.app_id == app_pk, jobs.c.client_request_id == client_request_id
        )
    ).first()


def get_job(conn: Connection, app_pk: int, job_id: int) -> AnyRow | None:
    """One job of one app."""
    return conn.execute(sa.select(jobs).where(jobs.c.id == job_id, jobs.c.app_id == app_pk)).first()


def find_due_jobs(
    conn: Connection, now_ms: int, handlers: Iterable[str], limit: int
) -> list[DueJob]:
    """WAITING jobs due at ``now_ms`` whose handler some live worker runs, oldest first."""
    names = list(handlers)
    if not names:
        return []
    rows = conn.execute(
        sa.select(
            jobs.c.id, jobs.c.version, jobs.c.handler, jobs.c.params, jobs.c.next_trigger_time
        )
        .where(
            jobs.c.status == JobStatus.WAITING,
            jobs.c.next_trigger_time <= now_ms,
            jobs.c.handler.in_(names),
        )
        .order_by(jobs.c.next_trigger_time)
        .limit(limit)
    ).all()
    return [DueJob(r.id, r.version, r.handler, r.params, r.next_trigger_time) for r in rows]


def next_due_time(conn: Connection, handlers: Iterable[str]) -> int | None:
    """The earliest trigger time among WAITING jobs that some live worker can run."""
    names = list(handlers)
    if not names:
        return None
    value = conn.execute(
        sa.select(sa.func.min(jobs.c.next_trigger_time)).where(
            jobs.c.status == JobStatus.WAITING, jobs.c.handler.in_(names)
        )
    ).scalar()
    return int(value) if value is not None else None


def claim_jobs(
    conn: Connection, due: Sequence[DueJob], owners: dict[int, str], now_ms: int
) -> set[int]:
    """Claim due jobs by compare-and-set on their version; return the ids this call won.

    One UPDATE claims the whole batch; a job another dispatcher claimed first has a new
    version and is left out. The random claim token tells the winners apart inside this
    transaction, whose row locks keep them ours until commit.
    """
    if not due:
        return set()
    token = secrets.token_hex(16)
    conn.execute(
        jobs.update()
        .where(sa.tuple_(jobs.c.id, jobs.c.version).in_([(j.id, j.version) for j in due]))
        .values(
            status=JobStatus.RUNNING,
            version=jobs.c.version + 1,
            claim_token=token,
            owner_worker=sa.case(owners, value=jobs.c.id, else_=None),
            updated_at=now_ms,
        )
    )
    won = conn.execute(
        sa.select(jobs.c.id).where(jobs.c.id.in_([j.id for j in due]), jobs.c.claim_token == token)
    ).scalars()
    return set(won)


def trigger_settings(conn: Connection, job_ids: Iterable[int]) -> dict[int, AnyRow]:
    """What the results consumer needs of each job: app, cron and callback URL."""
    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.app_id, jobs.c.cron_expr, jobs.c.callback_url).where(
            jobs.c.id.in_(sorted(set(job_ids)))
        )
    ).all()
    return {int(r.id): r for r in rows}


def finish_trigger(
    conn: Connection, job_id: int, status: JobStatus, next_trigger_time: int | None, now_ms: int
) -> None:
    """Move a RUNNING job on after its trigger ended: to a final state or back to WAITING."""
    values: dict[str, Any] = {
        "status": status,
        "version": jobs.c.version + 1,
        "updated_at": now_ms,
        "owner_worker": None,
    }
    if next_trigger_time is not None:
        values["next_trigger_time"] = next_trigger_time
    conn.execute(
        jobs.update()
        .where(jobs.c.id == job_id, jobs.c.status == JobStatus.RUNNING)
        .values(**values)
    )
