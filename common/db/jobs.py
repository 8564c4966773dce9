"""Jobs: create, read, find due ones, claim them by compare-and-set on version."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.rows import AnyRow
from common.db.schema import jobs
from common.schedule import MisfirePolicy, OverlapPolicy, Schedule, TriggerPolicy
from common.states import JobStatus


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

    def columns(self) -> dict[str, Any]:
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
        }


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
    policies: JobPolicies = field(default_factory=JobPolicies)


_POLICY_COLUMNS = [
    jobs.c.cron_expr,
    jobs.c.timezone,
    jobs.c.fixed_rate_seconds,
    jobs.c.misfire_policy,
    jobs.c.misfire_threshold_seconds,
    jobs.c.catch_up_window_seconds,
    jobs.c.overlap_policy,
]


def trigger_policy(row: Any) -> TriggerPolicy:
    """The policies of a job row (one read with ``_POLICY_COLUMNS``)."""
    return TriggerPolicy(
        schedule=Schedule(row.cron_expr, row.timezone, row.fixed_rate_seconds),
        misfire=MisfirePolicy(row.misfire_policy),
        misfire_threshold_ms=int(row.misfire_threshold_seconds) * 1000,
        catch_up_window_ms=int(row.catch_up_window_seconds) * 1000,
        overlap=OverlapPolicy(row.overlap_policy),
    )


@dataclass(frozen=True)
class DueJob:
    """A job whose trigger time has come, as read by the due scan."""

    id: int
    version: int
    handler: str
    trigger_time: int
    policy: TriggerPolicy


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
            **job.policies.columns(),
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
    """One job of one app (deleted jobs are gone)."""
    return conn.execute(
        sa.select(jobs).where(
            jobs.c.id == job_id, jobs.c.app_id == app_pk, jobs.c.deleted_at.is_(None)
        )
    ).first()


def find_due_jobs(
    conn: Connection, until_ms: int, handlers: Iterable[str], limit: int
) -> list[DueJob]:
    """WAITING jobs due by ``until_ms`` whose handler some live worker runs, soonest first."""
    names = list(handlers)
    if not names:
        return []
    rows = conn.execute(
        sa.select(
            jobs.c.id,
            jobs.c.version,
            jobs.c.handler,
            jobs.c.next_trigger_time,
            *_POLICY_COLUMNS,
        )
        .where(
            jobs.c.status == JobStatus.WAITING,
            jobs.c.next_trigger_time <= until_ms,
            jobs.c.handler.in_(names),
        )
        .order_by(jobs.c.next_trigger_time)
        .limit(limit)
    ).all()
    return [
        DueJob(r.id, r.version, r.handler, r.next_trigger_time, trigger_policy(r)) for r in rows
    ]


@dataclass(frozen=True)
class ClaimUpdate:
    """What claiming one trigger does to its job."""

    next_trigger_time: int | None
    status: JobStatus


def claim_jobs(
    conn: Connection, due: Sequence[DueJob], updates: Mapping[int, ClaimUpdate], now_ms: int
) -> set[int]:
    """Claim due jobs by compare-and-set on their version; return the ids this call won.

    One UPDATE claims the whole batch, each job moved on as ``updates`` says; a job
    another dispatcher claimed first has a new version and is left out. The random
    claim token tells the winners apart inside this transaction, whose row locks keep
    them ours until commit.
    """
    chosen = [j for j in due if j.id in updates]
    if not chosen:
        return set()
    token = secrets.token_hex(16)
    by_id = jobs.c.id
    conn.execute(
        jobs.update()
        .where(sa.tuple_(jobs.c.id, jobs.c.version).in_([(j.id, j.version) for j in chosen]))
        .values(
            status=sa.case({i: u.status.value for i, u in updates.items()}, value=by_id),
            next_trigger_time=sa.case(
                {i: u.next_trigger_time for i, u in updates.items()}, value=by_id
            ),
            version=jobs.c.version + 1,
            claim_token=token,
            updated_at=now_ms,
        )
    )
    won = conn.execute(
        sa.select(jobs.c.id).where(
            jobs.c.id.in_([j.id for j in chosen]), jobs.c.claim_token == token
        )
    ).scalars()
    return set(won)


def trigger_settings(conn: Connection, job_ids: Iterable[int]) -> dict[int, AnyRow]:
    """What the results consumer needs of each job: app, schedule, retries, callback URL."""
    rows = conn.execute(
        sa.select(
            jobs.c.id,
            jobs.c.app_id,
            jobs.c.status,
            jobs.c.cron_expr,
            jobs.c.fixed_rate_seconds,
            jobs.c.callback_url,
            jobs.c.max_retries,
            jobs.c.retry_backoff_seconds,
            jobs.c.retry_backoff_max_seconds,
        ).where(jobs.c.id.in_(sorted(set(job_ids))))
    ).all()
    return {int(r.id): r for r in rows}


def end_trigger(conn: Connection, job_id: int, final: JobStatus | None, now_ms: int) -> None:
    """A trigger of this job ended: release a held job.

    A one-shot job (``final`` given) takes its end state unless it was cancelled; a
    recurring job held by the QUEUE overlap policy goes back to WAITING. A job paused or
    cancelled meanwhile keeps that state.
    """
    if final is not None:
        ends = jobs.c.status.in_([JobStatus.RUNNING, JobStatus.PAUSED])
        new_status = sa.case((ends, final.value), else_=jobs.c.status)
    else:
        held = jobs.c.status == JobStatus.RUNNING
        new_status = sa.case((held, JobStatus.WAITING.value), else_=jobs.c.status)
    conn.execute(
        jobs.update()
        .where(jobs.c.id == job_id)
        .values(status=new_status, version=jobs.c.version + 1, updated_at=now_ms)
    )
