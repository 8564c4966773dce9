"""The workers page: state, load score and its parts, runs against capacity, CPU idle,
heartbeat age by the cluster clock, queue and consumers; drain."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.errors import KairosError, StoreUnavailableError
from common.topology import worker_queue
from common.vhost import vhost_queues
from common.worker_control import drains_requested, request_drain
from common.worker_views import worker_views
from services.api.console.render import page, redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, check_form, console_state, read_form
from services.api.state import ApiState

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


def workers_context(state: ApiState) -> dict[str, Any]:
    """Every worker, with its queue as the broker sees it when the management API answers."""
    now = state.clock.now_ms()
    with state.engine.connect() as conn:
        workers = worker_views(conn, now, state.settings.heartbeat_stale_ms)
    try:
        queues = {str(q["name"]): q for q in vhost_queues(state.settings)}
        queue_error = None
    except StoreUnavailableError as e:
        queues, queue_error = {}, str(e)
    return {
        "workers": workers,
        "queues": {w.worker_id: queues.get(worker_queue(w.worker_id)) for w in workers},
        "queue_error": queue_error,
        "draining": drains_requested(state.redis, state.keys, [w.worker_id for w in workers]),
        "stale_s": state.settings.heartbeat_stale_ms / 1000,
        "now": now,
    }


@router.get("/workers")
def workers_page(request: Request, session: SessionDep) -> Response:
    """The workers page."""
    context = workers_context(console_state(request))
    return page(request, "workers.html", session=session, nav="workers", **context)


def _drain(state: ApiState, worker_id: str, operator: str) -> str:
    request_drain(
        state.engine,
        state.redis,
        state.keys,
        state.clock,
        worker_id,
        state.settings.heartbeat_stale_ms,
        operator,
    )
    log.info(
        "console: operator %s asked worker %s to drain",
        operator,
        worker_id,
        extra={"worker_id": worker_id},
    )
    return (
        f"Worker {worker_id} drains at its next heartbeat: it finishes its runs, takes no "
        "more and stops; its queued executions move to live workers."
    )


@router.post("/workers/{worker_id}/drain")
async def drain(worker_id: str, request: Request, session: SessionDep) -> Response:
    """Ask one worker to drain and stop."""
    check_form(request, await read_form(request), session)
    try:
        done = await run_in_threadpool(
            _drain, console_state(request), worker_id, session.operator.name
        )
    except KairosError as e:
        return redirect("/console/workers", str(e), error=True)
    return redirect("/console/workers", done)
