"""The workers page: state, load score and its parts, runs against capacity, CPU idle,
heartbeat age by the cluster clock, queue and consumers; drain, undrain, drain and stop.

Drain is the standing drain of ``kairos workers drain`` (the worker stays up, takes
nothing new, its unstarted work moves) until Undrain; Drain and stop is a one-time
request: the worker drains and its process exits, as on SIGTERM, for an operator
with no shell on the worker's host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.errors import KairosError, StoreUnavailableError, WorkerNotDrainedError
from common.topology import worker_queue
from common.vhost import vhost_queues
from common.worker_views import worker_views
from services.api.console.access import ActingSessionDep, check_every_app
from services.api.console.render import PageContext, page, redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, check_form, console_state, read_form
from services.api.operator.worker_control import clear_drained, request_drain, set_drained
from services.api.state import ApiState

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


def workers_context(state: ApiState) -> PageContext:
    """Every worker, with its queue as the broker sees it when the management API answers."""
    now = state.clock.now_ms()
    with state.workers().reading() as store:
        workers = worker_views(store, now, state.settings.heartbeat_stale_ms)
    try:
        queues = {str(q["name"]): q for q in vhost_queues(state.settings)}
        queue_error = None
    except StoreUnavailableError as e:
        queues, queue_error = {}, str(e)
    ids = [w.worker_id for w in workers]
    marks = state.worker_marks()
    return {
        "workers": workers,
        "queues": {w.worker_id: queues.get(worker_queue(w.worker_id)) for w in workers},
        "queue_error": queue_error,
        "draining": marks.stops_requested(ids),
        "drained": marks.drained(ids),
        "stale_s": state.settings.heartbeat_stale_ms / 1000,
        "now": now,
    }


@router.get("/workers")
def workers_page(request: Request, session: SessionDep) -> Response:
    """The workers page."""
    context = workers_context(console_state(request))
    return page(request, "workers.html", session=session, nav="workers", **context)


def _drain_and_stop(state: ApiState, worker_id: str, operator: str) -> str:
    request_drain(state, worker_id, state.settings.heartbeat_stale_ms, operator)
    log.info(
        "console: operator %s asked worker %s to drain and stop",
        operator,
        worker_id,
        extra={"worker_id": worker_id},
    )
    return (
        f"Worker {worker_id} drains at its next heartbeat: it finishes its runs, takes no "
        "more and stops; its queued executions move to live workers."
    )


def _drain(state: ApiState, worker_id: str, operator: str) -> str:
    set_drained(state, worker_id, state.settings.heartbeat_stale_ms, operator)
    log.info(
        "console: operator %s drained worker %s",
        operator,
        worker_id,
        extra={"worker_id": worker_id},
    )
    return (
        f"Worker {worker_id} is drained from its next heartbeat: it takes no new work, its "
        "queued executions move to live workers, its runs finish and it stays up until "
        "undrained."
    )


def _undrain(state: ApiState, worker_id: str, operator: str) -> str:
    if not clear_drained(state, worker_id, operator):
        raise WorkerNotDrainedError(worker_id)
    log.info(
        "console: operator %s undrained worker %s",
        operator,
        worker_id,
        extra={"worker_id": worker_id},
    )
    return f"Worker {worker_id} takes work again from its next heartbeat."


async def _act(
    request: Request,
    session: ActingSessionDep,
    act: Callable[[ApiState, str, str], str],
    worker_id: str,
) -> Response:
    """Check the operator reaches every app (a worker serves them all) and the form,
    run ``act`` off the event loop, and come back with its notice."""
    check_every_app(session.operator, f"acting on worker {worker_id}")
    check_form(request, await read_form(request), session)
    try:
        done = await run_in_threadpool(
            act, console_state(request), worker_id, session.operator.name
        )
    except KairosError as e:
        return redirect("/console/workers", str(e), error=True)
    return redirect("/console/workers", done)


@router.post("/workers/{worker_id}/drain")
async def drain(worker_id: str, request: Request, session: ActingSessionDep) -> Response:
    """Drain one worker until it is undrained (``kairos workers drain``)."""
    return await _act(request, session, _drain, worker_id)


@router.post("/workers/{worker_id}/undrain")
async def undrain(worker_id: str, request: Request, session: ActingSessionDep) -> Response:
    """Let a drained worker take work again (``kairos workers undrain``)."""
    return await _act(request, session, _undrain, worker_id)


@router.post("/workers/{worker_id}/stop")
async def drain_and_stop(worker_id: str, request: Request, session: ActingSessionDep) -> Response:
    """Ask one worker to drain and stop."""
    return await _act(request, session, _drain_and_stop, worker_id)
