"""The run view (one execution and its log, reloading while it runs), and stuck
executions (``services.api.operator.execution_control``, as ``kairos executions`` uses
it): list them, fail one with a reason, requeue one that never started."""

from __future__ import annotations

import logging
import uuid
from types import MappingProxyType
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.db import execution_reads
from common.db.operator_reads import find_job
from common.errors import ExecutionNotFoundError, KairosError, ValidationFailedError
from common.operator_roles import EVERY_APP, AppScope
from services.api.console.access import ActingSessionDep
from services.api.console.render import PageContext, page, redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, check_form, console_state, read_form
from services.api.operator.commands import fail_stuck
from services.api.operator.execution_control import ExecutionStores, list_stuck, requeue_execution
from services.api.run_logs import run_log_page
from services.api.state import ApiState

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

OLDER_THAN_CHOICES = MappingProxyType({"1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 21600})
FAIL_WAIT_SECONDS = 5.0
MAX_REASON = 500


def _stores(state: ApiState) -> ExecutionStores:
    return ExecutionStores(
        state.engine, state.redis, state.keys, state.clock, state.settings.idempotency_ttl_seconds
    )


def stuck_context(state: ApiState, older: str, scope: AppScope = EVERY_APP) -> PageContext:
    """Executions QUEUED or overdue SCHEDULED for longer than the chosen age, of the
    apps in ``scope``."""
    seconds = OLDER_THAN_CHOICES.get(older, 300)
    return {
        "stuck": list_stuck(_stores(state), seconds * 1000, scope),
        "older": older if older in OLDER_THAN_CHOICES else "5m",
        "choices": list(OLDER_THAN_CHOICES),
        "now": state.clock.now_ms(),
    }


@router.get("/executions/stuck")
def stuck_page(
    request: Request, session: SessionDep, older: Annotated[str, Query(max_length=8)] = "5m"
) -> Response:
    """The stuck executions page."""
    context = stuck_context(console_state(request), older, session.operator.scope)
    return page(request, "stuck.html", session=session, nav="stuck", **context)


def _fail(state: ApiState, execution_id: str, reason: str, operator: str, scope: AppScope) -> str:
    recorded = fail_stuck(
        state.settings,
        execution_id,
        f"{reason} ({operator})",
        FAIL_WAIT_SECONDS,
        scope,
        actor=operator,
    )
    log.info(
        "console: operator %s failed execution %s: %s",
        operator,
        execution_id,
        reason,
        extra={"execution_id": execution_id},
    )
    if recorded:
        return f"Execution {execution_id} recorded FAILED (its job's retry policy applies)."
    return f"Execution {execution_id}: FAILED sent; a dispatcher records it when it runs."


def _requeue(state: ApiState, execution_id: str, operator: str, scope: AppScope) -> str:
    requeue_execution(_stores(state), execution_id, scope, actor=operator)
    log.info(
        "console: operator %s requeued execution %s",
        operator,
        execution_id,
        extra={"execution_id": execution_id},
    )
    return f"Execution {execution_id} requeued: the leading dispatcher sends it now."


@router.post("/executions/{execution_id}/fail")
async def fail(execution_id: str, request: Request, session: ActingSessionDep) -> Response:
    """Record an unfinished execution FAILED with the reason the form gives."""
    form = await read_form(request)
    check_form(request, form, session)
    back = "/console/executions/stuck"
    reason = " ".join(form.get("reason", "").split())[:MAX_REASON]
    try:
        if not reason:
            raise ValidationFailedError("reason", "say why the execution is failed")
        operator = session.operator
        done = await run_in_threadpool(
            _fail, console_state(request), execution_id, reason, operator.name, operator.scope
        )
    except KairosError as e:
        return redirect(back, str(e), error=True)
    return redirect(back, done)


@router.post("/executions/{execution_id}/requeue")
async def requeue(execution_id: str, request: Request, session: ActingSessionDep) -> Response:
    """Send an execution that never started to a live worker again."""
    check_form(request, await read_form(request), session)
    back = "/console/executions/stuck"
    try:
        operator = session.operator
        done = await run_in_threadpool(
            _requeue, console_state(request), execution_id, operator.name, operator.scope
        )
    except KairosError as e:
        return redirect(back, str(e), error=True)
    return redirect(back, done)


RUN_LINES_SHOWN = 5000
RUN_REFRESH_SECONDS = 2


def run_context(state: ApiState, execution_id: str, scope: AppScope = EVERY_APP) -> PageContext:
    """One run of a job of an app in ``scope``: its facts and the first lines of its log."""
    with state.engine.connect() as conn:
        execution = execution_reads.find(conn, execution_id)
        if execution is None or find_job(conn, execution.job_id, scope) is None:
            raise ExecutionNotFoundError(execution_id)
        log_page = run_log_page(conn, execution, 0, RUN_LINES_SHOWN + 1)
    more = len(log_page.lines) > RUN_LINES_SHOWN
    shown = log_page.model_copy(update={"lines": log_page.lines[:RUN_LINES_SHOWN]})
    return {
        "execution": execution,
        "log": shown,
        "more": more,
        "refresh_seconds": RUN_REFRESH_SECONDS,
    }


@router.get("/executions/{execution_id}")
def run_page(execution_id: uuid.UUID, request: Request, session: SessionDep) -> Response:
    """The run view: an execution and its log, reloading itself while the run goes on."""
    context = run_context(console_state(request), str(execution_id), session.operator.scope)
    return page(request, "run.html", session=session, nav="jobs", **context)
