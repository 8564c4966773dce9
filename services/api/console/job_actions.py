"""Pause, resume, trigger (with params for that run, or the job's), backfill and cancel
from the console: the OpenAPI's own job control, applied as the job's app, with who did
it in the log (``services.api.operator.jobs``)."""

from __future__ import annotations

import json

import pydantic
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.errors import JobNotFoundError, KairosError, ValidationFailedError
from services.api.console.access import ActingSessionDep
from services.api.console.render import redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import (
    check_form,
    console_state,
    read_form,
    safe_next,
)
from services.api.operator.jobs import ACTIONS, act_on_job, backfill_any_job
from services.api.schemas import BackfillAccepted, BackfillRequest, TriggerRequest

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


@router.post("/jobs/{job_id}/backfill")
async def job_backfill(job_id: int, request: Request, session: ActingSessionDep) -> Response:
    """Backfill one job over the form's range, then back to the job's page."""
    form = await read_form(request)
    check_form(request, form, session)
    back = safe_next(form.get("back") or f"/console/jobs/{job_id}")
    try:
        body = BackfillRequest.model_validate({"from": form.get("from"), "to": form.get("to")})
        operator = session.operator
        done = await run_in_threadpool(
            backfill_any_job, console_state(request), job_id, body, operator.name, operator.scope
        )
    except pydantic.ValidationError:
        return redirect(back, "Give both ends of the range: From and To.", error=True)
    except JobNotFoundError:
        raise  # a 404 page, for another app's job as for none
    except KairosError as e:
        return redirect(back, str(e), error=True)
    return redirect(back, backfill_notice(done))


def backfill_notice(done: BackfillAccepted) -> str:
    """What a backfill did, in a sentence."""
    left = f"; {done.leftToSchedule} left to its schedule" if done.leftToSchedule else ""
    return (
        f"Job {done.jobId} backfilled from {done.from_} to {done.to}: {done.created} runs "
        f"created, {done.existing} times had run already{left}."
    )


@router.post("/jobs/{job_id}/{action}")
async def job_action(
    job_id: int, action: str, request: Request, session: ActingSessionDep
) -> Response:
    """One action on one job, then back to the page the form was on."""
    form = await read_form(request)
    check_form(request, form, session)
    back = safe_next(form.get("back") or f"/console/jobs/{job_id}")
    if action not in ACTIONS:
        return redirect(back, f"There is no job action {action!r}.", error=True)
    try:
        body = trigger_body(form.get("params", "")) if action == "trigger" else None
        operator = session.operator
        done = await run_in_threadpool(
            act_on_job,
            console_state(request),
            job_id,
            action,
            operator.name,
            body,
            operator.scope,
        )
    except JobNotFoundError:
        raise  # a 404 page, for another app's job as for none
    except KairosError as e:
        return redirect(back, str(e), error=True)
    return redirect(back, done)


def trigger_body(text: str) -> TriggerRequest | None:
    """The trigger's body from the form's params field: None when it is blank (the
    job's params run); a JSON object otherwise, or ``ValidationFailedError``."""
    if not text.strip():
        return None
    try:
        params = json.loads(text)
    except ValueError as e:
        raise ValidationFailedError("params", f"is not JSON ({e}); give a JSON object") from e
    if not isinstance(params, dict):
        raise ValidationFailedError("params", 'must be a JSON object, e.g. {"day": 1}')
    return TriggerRequest(params=params)
