"""Signing in with an operator token, and out."""

from __future__ import annotations

import hmac
import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.db.operators import OperatorSession, end_session, operator_for_token, start_session
from common.errors import AuthThrottledError
from services.api.auth_failures import client_address
from services.api.console.render import page, redirect
from services.api.console.routing import ConsoleRoute
from services.api.console.session import (
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    SessionDep,
    check_form,
    check_origin,
    console_state,
    new_sign_in_token,
    read_form,
    safe_next,
    set_cookie,
)

log = logging.getLogger(__name__)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

SIGN_IN_FORM_SECONDS = 900


def _form(
    request: Request, next_path: str, status: int = 200, error: str | None = None
) -> Response:
    token = new_sign_in_token()
    response = page(request, "sign_in.html", status, sign_in=token, next=next_path, error=error)
    set_cookie(response, request, SIGN_IN_COOKIE, token, SIGN_IN_FORM_SECONDS)
    return response


@router.get("/login")
def sign_in_form(
    request: Request, next_path: Annotated[str | None, Query(alias="next")] = None
) -> Response:
    """The sign-in form."""
    return _form(request, safe_next(next_path))


def _start(request: Request, token: str) -> tuple[str, OperatorSession] | None:
    state = console_state(request)
    lifetime = int(state.settings.console_session_hours * 3_600_000)
    with state.engine.begin() as conn:
        operator = operator_for_token(conn, token)
        if operator is None:
            return None
        return start_session(conn, operator, state.clock.now_ms(), lifetime)


@router.post("/login")
async def sign_in(request: Request) -> Response:
    """Check the token; on success start a session and go where the operator was going."""
    form = await read_form(request)
    check_origin(request)
    next_path = safe_next(form.get("next"))
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    if not expected or not hmac.compare_digest(form.get("sign_in", ""), expected):
        return _form(request, next_path, 403, "The form expired; sign in again.")
    failures = console_state(request).failed_auth
    address = client_address(request)
    try:
        if failures is not None:
            await failures.check(address)
    except AuthThrottledError as e:
        response = _form(request, next_path, 429, str(e))
        response.headers["Retry-After"] = str(e.retry_after_seconds)
        return response
    started = await run_in_threadpool(_start, request, form.get("token", "").strip())
    if started is None:
        if failures is not None:
            await failures.failed(address, "console sign-in with an unknown token")
        return _form(request, next_path, 401, "That token is not known (kairos operator list).")
    value, session = started
    log.info("console sign-in: operator %s", session.operator.name)
    response = redirect(next_path)
    max_age = int(console_state(request).settings.console_session_hours * 3600)
    set_cookie(response, request, SESSION_COOKIE, value, max_age)
    response.delete_cookie(SIGN_IN_COOKIE, path="/console")
    return response


def _end(request: Request) -> None:
    with console_state(request).engine.begin() as conn:
        end_session(conn, request.cookies.get(SESSION_COOKIE, ""))


@router.post("/logout")
async def sign_out(request: Request, session: SessionDep) -> Response:
    """End the session."""
    check_form(request, await read_form(request), session)
    await run_in_threadpool(_end, request)
    log.info("console sign-out: operator %s", session.operator.name)
    response = redirect("/console/login", "Signed out.")
    response.delete_cookie(SESSION_COOKIE, path="/console")
    return response
