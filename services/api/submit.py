"""Submitting a job: validate, honour clientRequestId, commit, wake the dispatcher."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from fastapi.concurrency import run_in_threadpool
from sqlalchemy.exc import IntegrityError

from common.db.apps import App
from common.db.jobs import NewJob, find_by_client_request, insert_job
from common.errors import IdempotencyConflictError, ValidationFailedError
from common.states import JobStatus
from services.api.schemas import JobCreate
from services.api.state import ApiState
from services.api.validation import build_job
from services.api.wake import announce_created

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    """The job a request maps to, and whether this request created it."""

    job_id: int
    status: str
    created: bool


def merge_idempotency_key(body: JobCreate, header_key: str | None) -> JobCreate:
    """Take the Idempotency-Key header as clientRequestId; both given must agree."""
    if header_key is None:
        return body
    if body.clientRequestId is not None and body.clientRequestId != header_key:
        raise ValidationFailedError(
            "clientRequestId",
            "differs from the Idempotency-Key header; send one or make them equal",
        )
    return body.model_copy(update={"clientRequestId": header_key})


async def submit(state: ApiState, app: App, body: JobCreate) -> Submitted:
    """Store the job of a single create, from the event loop.

    A job without a clientRequestId is validated right here and stored with whatever
    other single creates wait at the same moment (``GroupInserter``): no thread hop per
    request. The handler list and the cluster clock are cached, so this blocks the loop
    only for their refresh every few seconds. The rest takes the path with lookups.
    """
    if body.clientRequestId is not None:
        return await run_in_threadpool(submit_job, state, app, body)
    now = state.clock.now_ms()
    job = build_job(body, app.id, state.known_handlers(), state.settings.max_params_bytes, now)
    job_id = await asyncio.wrap_future(state.inserter.submit(job, now))
    return Submitted(job_id, JobStatus.WAITING, created=True)


def submit_job(state: ApiState, app: App, body: JobCreate) -> Submitted:
    """Store the job (or find the earlier one with the same clientRequestId)."""
    now = state.clock.now_ms()
    job = build_job(body, app.id, state.known_handlers(), state.settings.max_params_bytes, now)
    if job.client_request_id is None:
        return Submitted(state.inserter.insert(job, now), JobStatus.WAITING, created=True)
    earlier = _earlier(state, app, job)
    if earlier is not None:
        return earlier
    try:
        with state.engine.begin() as conn:
            job_id = insert_job(conn, job, now)
    except IntegrityError:
        # A concurrent request with the same clientRequestId won the unique key.
        earlier = _earlier(state, app, job)
        if earlier is None:
            raise
        return earlier
    announce_created(state, [job], [job_id], now)
    return Submitted(job_id, JobStatus.WAITING, created=True)


def _earlier(state: ApiState, app: App, job: NewJob) -> Submitted | None:
    if job.client_request_id is None:
        return None
    with state.engine.connect() as conn:
        row = find_by_client_request(conn, app.id, job.client_request_id)
    if row is None:
        return None
    if row.request_hash != job.request_hash:
        raise IdempotencyConflictError(job.client_request_id, row.id)
    return Submitted(row.id, row.status, created=False)
