"""The audit page: the changes made through the OpenAPI, the console and the CLI, newest
first, filtered by app, actor and age (as ``kairos audit``). Operators and admins read
it; an operator that is not an admin of every app sees only its apps' rows."""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.db.operators import Operator
from common.operator_roles import Role
from services.api.console.access import ActingSessionDep
from services.api.console.render import PageContext, page
from services.api.console.routing import ConsoleRoute
from services.api.console.session import console_state
from services.api.operator.audit_reads import read_audit
from services.api.state import ApiState

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

SHOWN = 200
SINCE_CHOICES = MappingProxyType(
    {"1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000, "all": None}
)
Text = Annotated[str, Query(max_length=128)]


def audit_context(
    state: ApiState, operator: Operator, app: str, actor: str, since: str
) -> PageContext:
    """The rows the filters and the operator's reach allow, and the apps to filter by."""
    window = SINCE_CHOICES.get(since, SINCE_CHOICES["24h"])
    since_ms = None if window is None else state.clock.now_ms() - window
    whole = operator.may(Role.ADMIN) and operator.every_app
    rows = read_audit(
        state.engine, app or None, actor or None, since_ms, SHOWN, operator.scope, not whole
    )
    with state.apps().reading() as store:
        apps = store.apps_by_key(operator.scope)
    return {
        "rows": rows,
        "apps": sorted(apps.values(), key=lambda a: a.name),
        "filters": {
            "app": app,
            "actor": actor,
            "since": since if since in SINCE_CHOICES else "24h",
        },
        "since_choices": list(SINCE_CHOICES),
        "whole": whole,
    }


@router.get("/audit")
async def audit_page(
    request: Request,
    session: ActingSessionDep,
    app: Text = "",
    actor: Text = "",
    since: Text = "24h",
) -> Response:
    """The audit page."""
    context = await run_in_threadpool(
        audit_context, console_state(request), session.operator, app, actor, since
    )
    return page(request, "audit.html", session=session, nav="audit", **context)
