"""The apps pages: every app with what an operator granted it (handlers, callback
networks, limits, disabled or not), and a page per app with its stored jobs counted and
its standing in the fair share (runs waiting for a slot, going, and their start lag).

Read only: grants change with ``kairos app handlers|networks|limits|disable``, which the
pages name, so that what an app may do is set in one place and logged by the shell.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.db.apps import LAG_WINDOW_MS, AppRecord
from common.errors import UnknownAppError
from common.operator_roles import EVERY_APP, AppScope
from services.api.console.render import PageContext, page
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, console_state
from services.api.state import ApiState

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


def _default_networks(state: ApiState) -> list[str]:
    return [str(n) for n in state.callback_policy.allowed_networks]


def apps_context(state: ApiState, scope: AppScope = EVERY_APP) -> PageContext:
    """Every app in ``scope``, oldest first, with the cluster's default callback
    networks."""
    with state.apps().reading() as apps:
        listed = [a for a in apps.all_apps() if scope.includes(a.id)]
    return {"apps": listed, "default_networks": _default_networks(state)}


def app_context(state: ApiState, app_id: str, scope: AppScope = EVERY_APP) -> PageContext:
    """One app in ``scope`` and how many jobs it keeps stored. Raises
    ``UnknownAppError`` (for an app out of ``scope`` too)."""
    with state.apps().reading() as apps:
        found: AppRecord | None = apps.app_record(app_id)
        if found is None or not scope.includes(found.id):
            raise UnknownAppError(app_id)
        stored = apps.stored_job_count(found.id)
        [standing] = apps.app_activity(state.clock.now_ms(), app_id)
    return {
        "app": found,
        "stored_jobs": stored,
        "standing": standing,
        "lag_minutes": LAG_WINDOW_MS // 60_000,
        "default_networks": _default_networks(state),
    }


@router.get("/apps")
async def apps_page(request: Request, session: SessionDep) -> Response:
    """The apps page."""
    context = await run_in_threadpool(apps_context, console_state(request), session.operator.scope)
    return page(request, "apps.html", session=session, nav="apps", **context)


@router.get("/apps/{app_id}")
async def app_page(app_id: str, request: Request, session: SessionDep) -> Response:
    """One app's page."""
    scope = session.operator.scope
    context = await run_in_threadpool(app_context, console_state(request), app_id, scope)
    return page(request, "app.html", session=session, nav="apps", **context)
