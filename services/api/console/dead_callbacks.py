"""The callbacks page: the receiving hosts and apps as the notifiers report them (as
``kairos callbacks hosts`` shows them), and the dead callbacks, parked after their last
retry, with their last error; replay one or all (``services.api.operator.dead_letters``, as ``kairos
callbacks replay`` does)."""

from __future__ import annotations

import logging

import redis
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.db.delivery_store import MySqlDeliveryStore
from common.db.operators import Operator, OperatorSession
from common.errors import KairosError, StoreUnavailableError
from common.operator_roles import EVERY_APP, AppScope
from common.topology import CALLBACKS_DEAD_QUEUE
from common.vhost import vhost_queues
from services.api.console.access import ActingSessionDep
from services.api.console.render import PageContext, page, redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, check_form, console_state, read_form
from services.api.operator.callbacks import ReceivingHosts, receiving_hosts
from services.api.operator.commands import replay_dead_callbacks
from services.api.state import ApiState

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

LISTED = 200
REPLAY_ALL_LIMIT = 10_000
BACK = "/console/callbacks/dead"


def _queue_depth(state: ApiState) -> tuple[int | None, str | None]:
    try:
        queues = {q["name"]: q for q in vhost_queues(state.settings)}
    except StoreUnavailableError as e:
        return None, str(e)
    found = queues.get(CALLBACKS_DEAD_QUEUE)
    return (int(found["ready"]) + int(found["unacked"]) if found else 0), None


def _receiving_hosts(state: ApiState, scope: AppScope) -> tuple[ReceivingHosts | None, str | None]:
    try:
        return receiving_hosts(state).within(scope), None
    except redis.RedisError as e:
        return None, f"Redis did not answer ({type(e).__name__})"


def dead_context(state: ApiState, scope: AppScope = EVERY_APP) -> PageContext:
    """The dead deliveries of the apps in ``scope``, newest first, the dead queue's
    depth, and the receiving hosts and apps as the notifiers report them."""
    with state.engine.connect() as conn:
        store = MySqlDeliveryStore(conn)
        rows = store.dead_deliveries(LISTED, app_pks=scope.app_pks)
        total = store.count_dead(scope.app_pks)
    depth, error = _queue_depth(state)
    receiving, receiving_error = _receiving_hosts(state, scope)
    return {
        "receiving": receiving,
        "receiving_error": receiving_error,
        "deliveries": rows,
        "total": total,
        "depth": depth,
        "queue_error": error,
        "queue": CALLBACKS_DEAD_QUEUE,
        "now": state.clock.now_ms(),
    }


@router.get("/callbacks/dead")
def dead_page(request: Request, session: SessionDep) -> Response:
    """The dead callbacks page."""
    context = dead_context(console_state(request), session.operator.scope)
    return page(request, "dead.html", session=session, nav="dead", **context)


def _replay(state: ApiState, delivery_id: str | None, operator: Operator) -> str:
    limit = 1 if delivery_id else REPLAY_ALL_LIMIT
    report = replay_dead_callbacks(
        state.settings, limit, delivery_id, operator.scope, actor=operator.name
    )
    log.info("console: operator %s replayed %d dead callbacks", operator.name, report.replayed)
    if delivery_id and not report.replayed:
        raise KairosError(
            f"delivery {delivery_id} is not in {CALLBACKS_DEAD_QUEUE} (replayed already?)"
        )
    unreadable = (
        f" {report.unreadable} messages no notifier can read stay in {CALLBACKS_DEAD_QUEUE}."
        if report.unreadable
        else ""
    )
    return f"Replayed {report.replayed} dead callbacks.{unreadable}"


async def _replay_form(
    request: Request, session: OperatorSession, delivery_id: str | None
) -> Response:
    check_form(request, await read_form(request), session)
    try:
        done = await run_in_threadpool(
            _replay, console_state(request), delivery_id, session.operator
        )
    except KairosError as e:
        return redirect(BACK, str(e), error=True)
    return redirect(BACK, done)


@router.post("/callbacks/dead/replay")
async def replay_all(request: Request, session: ActingSessionDep) -> Response:
    """Send every dead callback back through the retry tiers."""
    return await _replay_form(request, session, None)


@router.post("/callbacks/dead/{delivery_id}/replay")
async def replay_one(delivery_id: str, request: Request, session: ActingSessionDep) -> Response:
    """Send one dead callback back through the retry tiers."""
    return await _replay_form(request, session, delivery_id)
