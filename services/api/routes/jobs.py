"""/openapi/jobs: create jobs (one or a batch), read a job, page through its executions."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response, status
from fastapi.responses import JSONResponse

from common.db import executions, jobs
from common.db.job_dependencies import parents_of_jobs
from common.errors import JobNotFoundError
from common.states import ExecutionStatus
from services.api import execution_reads
from services.api.batch import submit_batch
from services.api.deps import CallerDep, StateDep
from services.api.idempotency_header import HEADER, MAX_HEADER_CHARS, parse_key
from services.api.keyed_requests import response_headers
from services.api.locations import job_location
from services.api.openapi_doc import problem_responses
from services.api.schemas import (
    ExecutionList,
    JobAccepted,
    JobBatchAccepted,
    JobBatchCreate,
    JobCreate,
    JobView,
)
from services.api.submit import merge_idempotency_key, submit
from services.api.trace_header import TraceparentHeader
from services.api.views import job_view

router = APIRouter(prefix="/openapi/jobs", tags=["jobs"])

JobId = Annotated[int, Path(alias="jobId", ge=1, le=2**63 - 1, description="the job's id")]
# The opaque page token of a list; its form is checked here, its meaning by the reader.
Cursor = Annotated[
    str | None,
    Query(
        max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="nextCursor of the previous page"
    ),
]

_INVALID = (
    "Invalid request (a handler outside the app's handler patterns too; a callbackUrl "
    "reaching an address that is not public, unless KAIROS_CALLBACK_ALLOWED_NETWORKS "
    "admits it; a job in `after` that is missing, another app's or deleted, or named twice; "
    "a key reused with another body: `urn:kairos:problem:idempotency-conflict`); "
    "nothing was written"
)

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        min_length=1,
        max_length=MAX_HEADER_CHARS,
        pattern=r"^[ -~]+$",
        description="Idempotency key (IETF idempotency-key draft): 1 to 128 printable ASCII "
        'characters, plain (`report-1`) or as a structured-field string (`"report-1"`); '
        "compared exactly. A repeat answers as the first request did, with "
        "`Idempotent-Replayed: true`",
    ),
]


@router.post(
    "",
    operation_id="createJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobAccepted,
    responses=problem_responses(422, s422=_INVALID),
)
async def create_job(
    body: JobCreate,
    state: StateDep,
    caller: CallerDep,
    idempotency_key: IdempotencyKeyHeader = None,
    traceparent: TraceparentHeader = None,
) -> Response:
    """Store a job and answer at once; it runs at ``triggerAt`` (now when absent) or by cron.

    A valid `traceparent` header is kept with the job: its runs carry it to the handler
    and the callback (an invalid one is ignored).

    A repeat with the same `clientRequestId` (or `Idempotency-Key`) and body answers 202
    with the same job, as the first did, and `Idempotent-Replayed: true`; that holds
    for as long as the job's row exists, even after the job was deleted.
    """
    key = parse_key(idempotency_key)
    submitted = await submit(state, caller, merge_idempotency_key(body, key), traceparent)
    # Built directly: validating our own two fields against the model costs every create.
    return JSONResponse(
        {"jobId": submitted.job_id, "status": submitted.status},
        status_code=status.HTTP_202_ACCEPTED,
        headers=response_headers(job_location(submitted.job_id), not submitted.created),
    )


@router.post(
    "/batch",
    operation_id="createJobsBatch",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobBatchAccepted,
    responses=problem_responses(
        409,
        422,
        s409="A request with the same Idempotency-Key is in progress",
        s422="Some item is invalid (`errors` name each by index, as `jobs[3].cronExpr`), the "
        "batch is too large, or its Idempotency-Key was used for another batch; nothing "
        "was written",
    ),
)
def create_jobs_batch(
    body: JobBatchCreate,
    state: StateDep,
    caller: CallerDep,
    idempotency_key: IdempotencyKeyHeader = None,
    traceparent: TraceparentHeader = None,
) -> Response:
    """Store 1 to 1,000 jobs all or nothing; answer their ids in request order.

    A valid `traceparent` header is kept with every job of the batch.

    Each item is checked as a single create checks it, and may carry its own
    ``clientRequestId``: an item sent before with the same body maps to the earlier job.
    An ``Idempotency-Key`` keys the whole batch: a repeat within
    `KAIROS_IDEMPOTENCY_KEY_HOURS` gets the first answer back. ``Location`` names the
    first job. The batch counts one request per job against the app's rate limit.
    """
    if state.rate_limiter is not None:
        state.rate_limiter.take_more(caller, len(body.jobs))
    done = submit_batch(state, caller, body.jobs, parse_key(idempotency_key), traceparent)
    return JSONResponse(
        json.loads(done.answer.response),
        status_code=done.answer.status_code,
        headers=response_headers(done.answer.location, done.replayed),
    )


@router.get(
    "/{jobId:int}",
    operation_id="getJob",
    response_model=JobView,
    responses=problem_responses(404, s404="No such job (or deleted)"),
)
def get_job(
    job_id: JobId,
    state: StateDep,
    caller: CallerDep,
    preview: Annotated[int, Query(ge=0, le=100, description="list N next trigger times")] = 0,
) -> JobView:
    """The job, its status, next trigger time(s), policies and last execution."""
    with state.engine.connect() as conn:
        row = jobs.get_job(conn, caller.id, job_id)
        if row is None:
            raise JobNotFoundError(job_id)
        last = executions.list_for_job(conn, job_id, 1)
        running = bool(executions.jobs_with_runs(conn, [job_id]))
        after = parents_of_jobs(conn, [(row.id, row.has_dependencies)]).get(row.id, [])
    return job_view(row, last[0] if last else None, running, preview, after)


@router.get(
    "/{jobId:int}/executions",
    operation_id="listJobExecutions",
    response_model=ExecutionList,
    responses=problem_responses(404, s404="No such job (or deleted)"),
)
def list_executions(
    job_id: JobId,
    state: StateDep,
    caller: CallerDep,
    execution_status: Annotated[
        list[ExecutionStatus] | None,
        Query(alias="status", description="only these statuses (repeat for several)"),
    ] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=40,
            description="only triggers at or after this time: ISO 8601 (UTC without an "
            "offset) or epoch ms",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Cursor = None,
) -> ExecutionList:
    """The job's executions, newest first (trigger time, then attempt), one page at a time."""
    return execution_reads.list_executions(
        state, caller, job_id, execution_status or (), since, limit, cursor
    )
