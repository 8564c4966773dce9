"""Pause, resume, trigger and cancel from the console: the OpenAPI's own job control
(``services.api.control``), applied as the job's app, with who did it in the log."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.db.apps import App
from common.db.operator_reads import apps_by_key, find_job
from common.errors import JobNotFoundError, KairosError
from services.api import control, trigger
from services.api.console.render import redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import (
    SessionDep,
    check_form,
    console_state,
    read_form,
    safe_next,
)
from services.api.state import ApiState

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


def _pause(state: ApiState, app: App, job_id: int) -> str:
    control.pause_job(state, app, job_id)
    return f"Job {job_id} paused."


def _resume(state: ApiState, app: App, job_id: int) -> str:
    control.resume_job(state, app, job_id)
    return f"Job {job_id} resumed."


def _trigger(state: ApiState, app: App, job_id: int) -> str:
    answer, _ = trigger.trigger_job(state, app, job_id)
    execution_id = json.loads(answer.response)["executionId"]
    return f"Job {job_id} triggered: execution {execution_id}."


def _cancel(state: ApiState, app: App, job_id: int) -> str:
    control.cancel_job(state, app, job_id)
    return f"Job {job_id} cancelled."


ACTIONS: dict[str, Callable[[ApiState, App, int], str]] = {
    "pause": _pause,
    "resume": _resume,
    "trigger": _trigger,
    "cancel": _cancel,
}


def act_on_job(state: ApiState, job_id: int, action: str, operator: str) -> str:
    """Apply ``action`` to a job of any app, by the rules its app's calls follow; return
    what was done. Raises what the OpenAPI answers as 404, 403 or 409."""
    with state.engine.connect() as conn:
        row = find_job(conn, job_id)
        app = apps_by_key(conn).get(int(row.app_id)) if row is not None else None
    if row is None or app is None:
        raise JobNotFoundError(job_id)
    done = ACTIONS[action](state, app, job_id)
    log.info("console: operator %s: %s", operator, done, extra={"job_id": job_id})
    return done


@router.post("/jobs/{job_id}/{action}")
async def job_action(job_id: int, action: str, request: Request, session: SessionDep) -> Response:
    """One action on one job, then back to the page the form was on."""
    form = await read_form(request)
    check_form(request, form, session)
    back = safe_next(form.get("back") or f"/console/jobs/{job_id}")
    if action not in ACTIONS:
        return redirect(back, f"There is no job action {action!r}.", error=True)
    try:
        done = await run_in_threadpool(
            act_on_job, console_state(request), job_id, action, session.operator.name
        )
    except KairosError as e:
        return redirect(back, str(e), error=True)
    return redirect(back, done)
