"""/openapi/jobs: create a job, read it, list its executions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from fastapi.responses import JSONResponse

from common.db import executions, jobs
from common.errors import JobNotFoundError
from services.api.batch import submit_batch
from services.api.deps import CallerDep, StateDep
from services.api.schemas import (
    ExecutionList,
    JobAccepted,
    JobBatchAccepted,
    JobBatchCreate,
    JobCreate,
    JobView,
    Problem,
)
from services.api.submit import merge_idempotency_key, submit
from services.api.views import execution_view, job_view

router = APIRouter(prefix="/openapi/jobs", tags=["jobs"])

_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": Problem, "description": "Missing or unknown API key"},
    422: {
        "model": Problem,
        "description": "Invalid request (a handler outside the app's handler patterns "
        "too); nothing was written",
    },
}


@router.post(
    "",
    operation_id="createJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobAccepted,
    responses={
        **_ERRORS,
        200: {"model": JobAccepted, "description": "Same clientRequestId: the earlier job"},
    },
)
async def create_job(
    body: JobCreate,
    state: StateDep,
    caller: CallerDep,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> Response:
    """Store a job and answer at once; it runs at ``triggerAt`` (now when absent) or by cron."""
    submitted = await submit(state, caller, merge_idempotency_key(body, idempotency_key))
    # Built directly: validating our own two fields against the model cost ~9% of a create.
    return JSONResponse(
        {"jobId": submitted.job_id, "status": submitted.status},
        status_code=status.HTTP_202_ACCEPTED if submitted.created else status.HTTP_200_OK,
    )


@router.post(
    "/batch",
    operation_id="createJobsBatch",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobBatchAccepted,
    responses={
        **_ERRORS,
        200: {
            "model": JobBatchAccepted,
            "description": "Every item's clientRequestId was used before: the earlier jobs",
        },
        422: {
            "model": Problem,
            "description": "Some item is invalid (`errors` name each by index, as "
            "`jobs[3].cronExpr`) or the batch is too large; nothing was written",
        },
    },
)
def create_jobs_batch(
    body: JobBatchCreate, state: StateDep, caller: CallerDep, response: Response
) -> JobBatchAccepted:
    """Store 1 to 1,000 jobs all or nothing; answer their ids in request order.

    Each item is checked as a single create checks it, and may carry its own
    ``clientRequestId``: an item sent before with the same body maps to the earlier job.
    """
    submitted = submit_batch(state, caller, body.jobs)
    if not any(item.created for item in submitted):
        response.status_code = status.HTTP_200_OK
    return JobBatchAccepted(
        jobs=[JobAccepted(jobId=item.job_id, status=item.status) for item in submitted]
    )


@router.get(
    "/{job_id}",
    operation_id="getJob",
    response_model=JobView,
    responses={**_ERRORS, 404: {"model": Problem, "description": "No such job"}},
)
def get_job(
    job_id: int,
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
    return job_view(row, last[0] if last else None, running, preview)


@router.get(
    "/{job_id}/executions",
    operation_id="listJobExecutions",
    response_model=ExecutionList,
    responses={**_ERRORS, 404: {"model": Problem, "description": "No such job"}},
)
def list_executions(
    job_id: int,
    state: StateDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> ExecutionList:
    """The job's executions, newest first."""
    with state.engine.connect() as conn:
        if jobs.get_job(conn, caller.id, job_id) is None:
            raise JobNotFoundError(job_id)
        rows = executions.list_for_job(conn, job_id, limit)
    return ExecutionList(jobId=job_id, executions=[execution_view(r) for r in rows])
