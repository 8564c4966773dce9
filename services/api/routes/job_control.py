"""/openapi/jobs: list, pause, resume, trigger, backfill, cancel, update and delete jobs."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from fastapi.responses import JSONResponse

from common.db.job_control import JobFilter
from common.errors import ValidationFailedError
from common.states import JobStatus
from services.api import backfill, job_control, trigger
from services.api.deps import CallerDep, StateDep
from services.api.idempotency_header import parse_key
from services.api.keyed_requests import response_headers
from services.api.locations import job_executions_location
from services.api.openapi_doc import problem_responses
from services.api.rate_limit import RowCharge
from services.api.routes.jobs import Cursor, IdempotencyKeyHeader, JobId
from services.api.schemas import (
    BackfillAccepted,
    BackfillRequest,
    JobList,
    JobPatch,
    JobView,
    TriggerAccepted,
    TriggerRequest,
)
from services.api.trace_header import TraceparentHeader

router = APIRouter(prefix="/openapi/jobs", tags=["jobs"])

_NOT_FOUND = "No such job (or deleted)"
_REFUSED = "Not allowed from the job's status (`jobStatus` says which); nothing changed"
_ONE_JOB = problem_responses(404, s404=_NOT_FOUND)
_CHANGE = problem_responses(404, 409, s404=_NOT_FOUND, s409=_REFUSED)
_FORBIDDEN = (
    "The app is disabled, or may no longer use the job's handler (its handler patterns "
    "changed after the job was stored); nothing changed"
)
_RUN = problem_responses(403, 404, 409, s403=_FORBIDDEN, s404=_NOT_FOUND, s409=_REFUSED)


@router.get(
    "",
    operation_id="listJobs",
    response_model=JobList,
    responses=problem_responses(422, s422="Invalid filter or cursor"),
)
def list_jobs(
    state: StateDep,
    caller: CallerDep,
    job_status: Annotated[
        JobStatus | None, Query(alias="status", description="stored status to match")
    ] = None,
    handler: Annotated[str | None, Query(max_length=200, description="exact handler")] = None,
    name_prefix: Annotated[
        str | None,
        Query(alias="namePrefix", max_length=200, description="jobName starts with this"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Cursor = None,
) -> JobList:
    """The app's jobs, newest first, one page at a time.

    ``status`` matches the stored status, so a recurring WAITING job whose run is going
    is listed under WAITING though it shows RUNNING. Each job carries its last execution.
    """
    where = JobFilter(job_status, handler, name_prefix)
    return job_control.list_jobs(state, caller, where, limit, cursor)


@router.post(
    "/{jobId:int}/pause", operation_id="pauseJob", response_model=JobView, responses=_CHANGE
)
def pause_job(job_id: JobId, state: StateDep, caller: CallerDep) -> JobView:
    """Stop firing the job by schedule; runs already going continue. Repeat: no change."""
    job_control.pause_job(state, caller, job_id)
    return job_control.read_job_view(state, caller, job_id)


@router.post(
    "/{jobId:int}/resume", operation_id="resumeJob", response_model=JobView, responses=_RUN
)
def resume_job(job_id: JobId, state: StateDep, caller: CallerDep) -> JobView:
    """Fire a paused job by schedule again; a recurring job's triggers that fell inside
    the pause are recorded SKIPPED."""
    job_control.resume_job(state, caller, job_id)
    return job_control.read_job_view(state, caller, job_id)


async def refuse_null_body(request: Request) -> None:
    """Refuse a trigger whose body is JSON null: the document says a body is an object
    or absent, and FastAPI alone would read null as no body."""
    if (await request.body()).strip() == b"null":
        raise ValidationFailedError(
            "body", 'send a JSON object ({"params": {...}}), or no body for the job\'s params'
        )


@router.post(
    "/{jobId:int}/trigger",
    operation_id="triggerJob",
    dependencies=[Depends(refuse_null_body)],
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TriggerAccepted,
    responses={
        **_RUN,
        **problem_responses(
            409,
            422,
            s409=f"{_REFUSED}; or no free trigger time was found "
            "(`urn:kairos:problem:trigger-busy`: try again); or a request with the same "
            "Idempotency-Key is in progress",
            s422="Invalid params (as a job's: a JSON object within the size limit) or "
            "Idempotency-Key, or a key used for a trigger of another job or with other "
            "params (`urn:kairos:problem:idempotency-conflict`); nothing was written",
        ),
    },
)
def trigger_job(
    job_id: JobId,
    state: StateDep,
    caller: CallerDep,
    idempotency_key: IdempotencyKeyHeader = None,
    body: TriggerRequest | None = None,
    traceparent: TraceparentHeader = None,
) -> Response:
    """Run the job once now, besides its schedule (a finished one-shot job too).

    A body ``{"params": {...}}`` gives this run its own params in place of the job's
    (the job keeps its own; the execution shows them). A valid `traceparent` header is
    this run's own; without one the run carries the job's trace id under a fresh parent
    id (none if the job has no traceparent). With an ``Idempotency-Key``, a repeat
    within `KAIROS_IDEMPOTENCY_KEY_HOURS` (a retry after a timeout) with the same params
    answers with the same execution and runs nothing more.
    """
    key = parse_key(idempotency_key)
    answer, replayed = trigger.trigger_job(state, caller, job_id, key, body, traceparent)
    return JSONResponse(
        json.loads(answer.response),
        status_code=answer.status_code,
        headers=response_headers(answer.location, replayed),
    )


@router.post(
    "/{jobId:int}/backfill",
    operation_id="backfillJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BackfillAccepted,
    responses={
        **_RUN,
        **problem_responses(
            409,
            422,
            s409="Only a WAITING or RUNNING job can be backfilled (`jobStatus` says which "
            "it is); nothing changed",
            s422="A one-shot job; or `from`/`to` invalid, `to` not after `from`, `from` not "
            "in the past, or more trigger times in range than KAIROS_BACKFILL_MAX_RUNS; "
            "nothing written",
        ),
    },
)
def backfill_job(
    job_id: JobId, body: BackfillRequest, state: StateDep, caller: CallerDep, response: Response
) -> BackfillAccepted:
    """Run the cron or fixed-rate job's past trigger times in ``[from, to)`` that have no
    execution yet, as runs marked ``backfill``.

    Times are the job's own schedule in its timezone; ``to`` later than now counts as
    now, and times at or after the job's next trigger time are left to the schedule.
    Each time runs once however often it is backfilled: a repeat creates nothing more.
    The runs wait for slots in the app's fair share like any other run; ``Location``
    names the job's executions, where they are listed. Each run created counts one
    request against the app's rate limit: with too few left, 429 with `Retry-After`
    and nothing written (a repeat that creates nothing counts as one request).
    """
    charge = RowCharge(state.rate_limiter, caller)
    answer = backfill.backfill_job(state, caller, job_id, body, charge)
    response.headers["Location"] = job_executions_location(job_id)
    return answer


@router.post(
    "/{jobId:int}/cancel", operation_id="cancelJob", response_model=JobView, responses=_CHANGE
)
def cancel_job(job_id: JobId, state: StateDep, caller: CallerDep) -> JobView:
    """Stop the job for good; its runs not yet sent to a worker are cancelled too.

    Runs already on a worker finish and are recorded. Repeat: no change.
    """
    job_control.cancel_job(state, caller, job_id)
    return job_control.read_job_view(state, caller, job_id)


@router.patch(
    "/{jobId:int}",
    operation_id="updateJob",
    response_model=JobView,
    responses={
        **_CHANGE,
        **problem_responses(
            422,
            s422="Invalid, or the job's handler is one the app may no longer use; nothing written",
        ),
    },
)
def update_job(job_id: JobId, body: JobPatch, state: StateDep, caller: CallerDep) -> JobView:
    """Change fields of a live job, validated as at create.

    A new schedule fires first at its next time after now.
    """
    job_control.update_job(state, caller, job_id, body)
    return job_control.read_job_view(state, caller, job_id)


@router.delete(
    "/{jobId:int}",
    operation_id="deleteJob",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_ONE_JOB,
)
def delete_job(job_id: JobId, state: StateDep, caller: CallerDep) -> None:
    """Cancel the job and hide it: it never fires again and every read answers 404.

    Its clientRequestId stays taken: a create repeating it answers as the first did.
    """
    job_control.delete_job(state, caller, job_id)
