"""The alerts page: the alert rules (as ``kairos alerts list`` shows them), a form to
add one (its signing secret shown once) and a button to remove each. Admins of every
app only: a rule may reach every app's runs and every worker. Each change is written
to the audit trail under the operator's name."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.alerts.kinds import AlertKind, AlertRuleInvalid, parse_kinds
from common.alerts.rules import (
    DEFAULT_EVERY_SECONDS,
    AlertRule,
    NewAlertRule,
    add_rule,
    read_rules,
    remove_rule,
)
from common.db.apps import MySqlAppStore
from common.db.operators import Operator, OperatorSession
from common.errors import CallbackUrlRefusedError
from common.operator_roles import Role
from services.api.console.access import check_every_app, check_role
from services.api.console.render import PageContext, page, redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, check_form, console_state, read_form
from services.api.state import ApiState

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

BACK = "/console/alerts"


def check_alert_admin(operator: Operator, what: str) -> None:
    """Refuse (a 403 page) anyone but an admin of every app."""
    check_role(operator, Role.ADMIN, what)
    check_every_app(operator, what)


def alerts_context(state: ApiState) -> PageContext:
    """The rules, oldest first, and the apps a new rule may name."""
    with state.engine.connect() as conn:
        rules = read_rules(conn)
        apps = MySqlAppStore(conn).all_apps()
    return {
        "rules": rules,
        "apps": sorted(apps, key=lambda a: a.name),
        "kinds": [k.value for k in AlertKind],
        "default_every": DEFAULT_EVERY_SECONDS,
    }


def _whole(form: dict[str, str], name: str, default: int) -> int:
    text = form.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise AlertRuleInvalid(f"{name} must be a whole number, not {text!r}") from None


def asked_rule(form: dict[str, str], kinds: list[str]) -> NewAlertRule:
    """The rule a posted form asks for. Raises ``AlertRuleInvalid``."""
    return NewAlertRule(
        url=form.get("webhook", "").strip(),
        kinds=parse_kinds(",".join(kinds)),
        app_id=form.get("app") or None,
        streak=_whole(form, "streak", 1),
        every_seconds=_whole(form, "every", DEFAULT_EVERY_SECONDS),
    )


def _add(state: ApiState, asked: NewAlertRule, actor: str) -> tuple[AlertRule, str]:
    with state.engine.begin() as conn:
        return add_rule(conn, asked, actor, state.clock.now_ms(), state.callback_policy)


def _remove(state: ApiState, rule_id: str, actor: str) -> AlertRule | None:
    with state.engine.begin() as conn:
        return remove_rule(conn, rule_id, actor, state.clock.now_ms())


@router.get("/alerts")
async def alerts_page(request: Request, session: SessionDep) -> Response:
    """The alerts page."""
    check_alert_admin(session.operator, "the alerts page")
    context = await run_in_threadpool(alerts_context, console_state(request))
    return page(request, "alerts.html", session=session, nav="alerts", **context)


async def _checked_form(request: Request, session: OperatorSession) -> dict[str, str]:
    check_alert_admin(session.operator, f"{request.method} {request.url.path}")
    form = await read_form(request)
    check_form(request, form, session)
    return form


@router.post("/alerts")
async def add_alert(request: Request, session: SessionDep) -> Response:
    """Add a rule; the page that answers shows its signing secret, once."""
    form = await _checked_form(request, session)
    kinds = [k.value for k in AlertKind if form.get(f"on_{k.value}")]
    state = console_state(request)
    try:
        asked = asked_rule(form, kinds)
        rule, secret = await run_in_threadpool(_add, state, asked, session.operator.name)
    except (AlertRuleInvalid, CallbackUrlRefusedError) as e:
        return redirect(BACK, str(e), error=True)
    log.info("console: operator %s added alert rule %s", session.operator.name, rule.rule_id)
    context = await run_in_threadpool(alerts_context, state)
    return page(
        request,
        "alerts.html",
        session=session,
        nav="alerts",
        added=rule,
        secret=secret,
        **context,
    )


@router.post("/alerts/{rule_id}/remove")
async def remove_alert(rule_id: str, request: Request, session: SessionDep) -> Response:
    """Remove a rule; its alerts not yet delivered go with it."""
    await _checked_form(request, session)
    removed = await run_in_threadpool(
        _remove, console_state(request), rule_id, session.operator.name
    )
    if removed is None:
        return redirect(BACK, f"No alert rule {rule_id} (removed already?)", error=True)
    return redirect(BACK, f"Alert rule {rule_id} removed.")
