"""Idempotency of creates: the one resolver of earlier jobs for single and batch
creates.

Creates (single and batch items) are keyed by the job's ``clientRequestId`` (or a
single create's ``Idempotency-Key``), stored on the job itself, compared exactly. A key
names its job as long as the job's row exists, deleted jobs included, so one key never
makes two jobs. A repeat with the same body answers as the first request did (the job
as created, WAITING); the same key with another body is a 422
(``IdempotencyConflictError``) and changes nothing. Batch creates and triggers that
carry an ``Idempotency-Key`` remember their whole answer: ``keyed_requests``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.db.jobs import NewJob, earlier_rows
from common.db.rows import AnyRow
from common.errors import IdempotencyConflictError
from common.states import JobStatus


@dataclass(frozen=True)
class Submitted:
    """The job a create request maps to, and whether this request created it."""

    job_id: int
    status: str
    created: bool


Earlier = Submitted | IdempotencyConflictError


def match_earlier(job: NewJob, row: AnyRow) -> Earlier:
    """The answer for ``job`` whose clientRequestId names the stored ``row``: the first
    answer again (the job as created: WAITING), or a conflict for another body."""
    if row.request_hash != job.request_hash:
        return IdempotencyConflictError(str(job.client_request_id), int(row.id))
    return Submitted(int(row.id), JobStatus.WAITING, created=False)


def resolve_earlier(
    conn: Connection, app_pk: int, new_jobs: Sequence[NewJob]
) -> list[Earlier | None]:
    """Per job, the earlier job its clientRequestId names (or a conflict), else None."""
    rows = earlier_rows(conn, app_pk, [job.client_request_id for job in new_jobs])
    return [
        None if row is None else match_earlier(job, row)
        for job, row in zip(new_jobs, rows, strict=True)
    ]
