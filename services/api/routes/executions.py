"""/openapi/executions: one execution by its id, and its run log."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Query

from services.api import execution_reads
from services.api.deps import CallerDep, StateDep
from services.api.openapi_doc import problem_responses
from services.api.run_logs import RunLogPage, app_run_log
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


@router.get(
    "/{executionId}/logs",
    operation_id="getExecutionLogs",
    response_model=RunLogPage,
    responses=problem_responses(
        404, s404="No such execution of the app's jobs (or its job was deleted)"
    ),
)
def get_execution_logs(
    execution_id: Annotated[uuid.UUID, Path(alias="executionId")],
    state: StateDep,
    caller: CallerDep,
    after: Annotated[
        int,
        Query(ge=0, le=2_147_483_647, description="only lines past this seq (0: from the start)"),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> RunLogPage:
    """The lines the execution's handler logged, oldest first, one page at a time.

    Follow a running execution by asking again with ``after=nextAfter`` until a page
    comes back empty with ``ended`` true."""
    with state.engine.connect() as conn:
        return app_run_log(conn, caller.id, str(execution_id), after, limit)
