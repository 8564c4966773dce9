"""A job's callback deliveries (/openapi/jobs/{jobId}/callbacks) and replaying one
(/openapi/callbacks/{deliveryId}/replay)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from services.api import callback_reads
from services.api.deps import CallerDep, StateDep
from services.api.openapi_doc import problem_responses
from services.api.routes.jobs import Cursor, JobId
from services.api.schemas import CallbackList, CallbackReplayAccepted

router = APIRouter(prefix="/openapi", tags=["callbacks"])

DeliveryIdPath = Annotated[
    str,
    Path(
        alias="deliveryId",
        pattern=r"^msg_[0-9a-f]{32}$",
        description="the delivery's id, as its webhook-id header said",
    ),
]


@router.get(
    "/jobs/{jobId:int}/callbacks",
    operation_id="listJobCallbacks",
    response_model=CallbackList,
    responses=problem_responses(404, s404="No such job (or deleted)"),
)
def list_callbacks(
    job_id: JobId,
    state: StateDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Cursor = None,
) -> CallbackList:
    """The job's callback deliveries, newest first: state, every attempt (time, status
    code or error, duration) and when the next attempt is due."""
    return callback_reads.list_callbacks(state, caller, job_id, limit, cursor)


@router.post(
    "/callbacks/{deliveryId}/replay",
    operation_id="replayCallback",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=CallbackReplayAccepted,
    responses=problem_responses(
        404,
        409,
        s404="No such callback delivery of the app's jobs",
        s409="The delivery is still on its way (PENDING or RETRYING); only a DELIVERED or "
        "DEAD one is replayed",
    ),
)
def replay_callback(
    delivery_id: DeliveryIdPath, state: StateDep, caller: CallerDep
) -> CallbackReplayAccepted:
    """Send a DELIVERED or DEAD callback again, on a fresh retry schedule, with the same
    webhook-id and body (receivers deduplicate on the id)."""
    return callback_reads.replay_callback(state, caller, delivery_id)
