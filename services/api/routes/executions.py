"""/openapi/executions: one execution by its id."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path

from services.api import execution_reads
from services.api.deps import CallerDep, StateDep
from services.api.openapi_doc import problem_responses
from services.api.schemas import ExecutionView

router = APIRouter(prefix="/openapi/executions", tags=["executions"])


@router.get(
    "/{executionId}",
    operation_id="getExecution",
    response_model=ExecutionView,
    responses=problem_responses(
        404, s404="No such execution of the app's jobs (or its job was deleted)"
    ),
)
def get_execution(
    execution_id: Annotated[uuid.UUID, Path(alias="executionId")],
    state: StateDep,
    caller: CallerDep,
) -> ExecutionView:
    """One execution: its job, attempt, status, times, message and result."""
    return execution_reads.get_execution(state, caller, str(execution_id))
