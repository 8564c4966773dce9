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

from common.db.jobs import KeyedJob, NewJob, keyed_jobs
from common.errors import IdempotencyConflictError
from common.states import JobStatus


@dataclass(frozen=True)
class Submitted:
    """The job a create request maps to, and whether this request created it."""

    job_id: int
    status: str
    created: bool


Earlier = Submitted | IdempotencyConflictError


def match_earlier(job: NewJob, stored: KeyedJob) -> Earlier:
    """The answer for ``job`` whose clientRequestId names the ``stored`` job: the first
    answer again (the job as created: WAITING), or a conflict for another body."""
    if stored.request_hash != job.request_hash:
        return IdempotencyConflictError(str(job.client_request_id), stored.job_id)
    return Submitted(stored.job_id, JobStatus.WAITING, created=False)


def resolve_earlier(conn: Connection, new_jobs: Sequence[NewJob]) -> list[Earlier | None]:
    """Per job, the earlier job its clientRequestId names (or a conflict), else None.

    The jobs may belong to several apps (a group of single creates): one query per app.
    """
    answers: list[Earlier | None] = [None] * len(new_jobs)
    by_app: dict[int, list[int]] = {}
    for index, job in enumerate(new_jobs):
        if job.client_request_id is not None:
            by_app.setdefault(job.app_pk, []).append(index)
    for app_pk, indexes in by_app.items():
        found = keyed_jobs(conn, app_pk, [new_jobs[i].client_request_id for i in indexes])
        for index, stored in zip(indexes, found, strict=True):
            if stored is not None:
                answers[index] = match_earlier(new_jobs[index], stored)
    return answers
