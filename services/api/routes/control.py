"""/openapi/jobs: list, pause, resume, trigger, cancel, update and delete jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from common.db.control import JobFilter
from common.states import JobStatus
from services.api import control
from services.api.deps import CallerDep, StateDep
from services.api.schemas import JobList, JobPatch, JobView, Problem, TriggerAccepted

router = APIRouter(prefix="/openapi/jobs", tags=["jobs"])

_AUTH: dict[int | str, dict[str, object]] = {
    401: {"model": Problem, "description": "Missing or unknown API key"},
}
_ONE_JOB: dict[int | str, dict[str, object]] = {
    **_AUTH,
    404: {"model": Problem, "description": "No such job (or deleted)"},
}
_CHANGE: dict[int | str, dict[str, object]] = {
    **_ONE_JOB,
    409: {"model": Problem, "description": "Not allowed from the job's status; nothing changed"},
}
_RUN: dict[int | str, dict[str, object]] = {
    **_CHANGE,
    403: {
        "model": Problem,
        "description": "The app may no longer use the job's handler (its handler patterns "
        "changed after the job was stored); nothing changed",
    },
}


@router.get(
    "",
    operation_id="listJobs",
    response_model=JobList,
    responses={**_AUTH, 422: {"model": Problem, "description": "Invalid filter or cursor"}},
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
    cursor: Annotated[
        str | None, Query(max_length=64, description="nextCursor of the previous page")
    ] = None,
) -> JobList:
    """The app's jobs, newest first, one page at a time.

    ``status`` matches the stored status, so a recurring WAITING job whose run is going
    is listed under WAITING though it shows RUNNING. Each job carries its last execution.
    """
    where = JobFilter(job_status, handler, name_prefix)
    return control.list_jobs(state, caller, where, limit, cursor)


@router.post("/{job_id}/pause", operation_id="pauseJob", response_model=JobView, responses=_CHANGE)
def pause_job(job_id: int, state: StateDep, caller: CallerDep) -> JobView:
    """Stop firing the job by schedule; runs already going continue. Repeat: no change."""
    control.pause_job(state, caller, job_id)
    return control.read_job_view(state, caller, job_id)


@router.post("/{job_id}/resume", operation_id="resumeJob", response_model=JobView, responses=_RUN)
def resume_job(job_id: int, state: StateDep, caller: CallerDep) -> JobView:
    """Fire a paused job by schedule again, from its stored next trigger time.

    A trigger time passed while paused is handled by the job's misfire policy.
    """
    control.resume_job(state, caller, job_id)
    return control.read_job_view(state, caller, job_id)


@router.post(
    "/{job_id}/trigger",
    operation_id="triggerJob",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=TriggerAccepted,
    responses=_RUN,
)
def trigger_job(job_id: int, state: StateDep, caller: CallerDep) -> TriggerAccepted:
    """Run the job once now, besides its schedule (a finished one-shot job too)."""
    execution = control.trigger_job(state, caller, job_id)
    return TriggerAccepted(
        jobId=job_id, executionId=execution.execution_id, status=execution.status
    )


@router.post(
    "/{job_id}/cancel", operation_id="cancelJob", response_model=JobView, responses=_CHANGE
)
def cancel_job(job_id: int, state: StateDep, caller: CallerDep) -> JobView:
    """Stop the job for good; its runs not yet sent to a worker are cancelled too.

    Runs already on a worker finish and are recorded. Repeat: no change.
    """
    control.cancel_job(state, caller, job_id)
    return control.read_job_view(state, caller, job_id)


@router.patch(
    "/{job_id}",
    operation_id="updateJob",
    response_model=JobView,
    responses={
        **_CHANGE,
        422: {
            "model": Problem,
            "description": "Invalid, or the job's handler is one the app may no longer use; "
            "nothing written",
        },
    },
)
def update_job(job_id: int, body: JobPatch, state: StateDep, caller: CallerDep) -> JobView:
    """Change fields of a live job, validated as at create.

    A new schedule fires first at its next time after now.
    """
    control.update_job(state, caller, job_id, body)
    return control.read_job_view(state, caller, job_id)


@router.delete(
    "/{job_id}",
    operation_id="deleteJob",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=_ONE_JOB,
)
def delete_job(job_id: int, state: StateDep, caller: CallerDep) -> None:
    """Cancel the job and hide it: it never fires again and every read answers 404."""
    control.delete_job(state, caller, job_id)
