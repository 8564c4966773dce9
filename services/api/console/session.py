"""Signing in to the console and keeping forms honest.

A session is a random cookie value (stored hashed in MySQL with the session's CSRF
token), sent back only to /console, HttpOnly and SameSite=Strict, Secure over HTTPS.
Every form carries the session's CSRF token and is refused without it; a request whose
Origin names another host is refused too. The sign-in form, posted before any session
exists, carries a random token that must match a cookie set with the form.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated
from urllib.parse import parse_qsl, urlsplit

from fastapi import Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from common.db.operators import OperatorSession, find_session, note_session_seen
from common.errors import KairosError
from services.api.auth_failures import client_address
from services.api.console.render import COOKIE_PATH
from services.api.state import ApiState

SESSION_COOKIE = "kairos_console"
SIGN_IN_COOKIE = "kairos_console_sign_in"
MAX_FORM_BYTES = 64 * 1024
# A session's last request is written at most this often.
SEEN_EVERY_MS = 60_000


class SignInRequired(Exception):
    """The request has no live session; the browser is sent to sign in, then back."""

    def __init__(self, back_to: str) -> None:
        super().__init__(back_to)
        self.back_to = back_to


class FormRefusedError(KairosError):
    """A form without the session's CSRF token, or posted from another site."""


def console_state(request: Request) -> ApiState:
    """The API process's stores and settings."""
    state: ApiState = request.app.state.kairos
    return state


def back_path(request: Request) -> str:
    """Where this request was going, to come back to after signing in."""
    query = f"?{request.url.query}" if request.url.query else ""
    return request.url.path + query


def safe_next(value: str | None) -> str:
    """A console path to go to after signing in; anything else goes to the overview
    (no redirect to another site)."""
    if value and value.startswith("/console") and "//" not in value and "\\\\" not in value:
        return value
    return "/console/"


def _live_session(state: ApiState, value: str) -> OperatorSession | None:
    now_ms = state.clock.now_ms()
    idle_ms = int(state.settings.console_idle_minutes * 60_000)
    with state.engine.connect() as conn:
        session = find_session(conn, value, now_ms, idle_ms)
    if session is not None and now_ms - session.last_seen_at >= SEEN_EVERY_MS:
        with state.engine.begin() as conn:
            note_session_seen(conn, value, now_ms)
    return session


async def current_session(request: Request) -> OperatorSession:
    """The signed-in operator's session; ``SignInRequired`` without one, or when it made
    no request for ``console_idle_minutes``. Its last request is noted at most once a
    minute, so browsing costs no write per page. A cookie that names no live session
    counts as a failed authentication of the client's address (each costs a lookup)."""
    value = request.cookies.get(SESSION_COOKIE)
    if value:
        state = console_state(request)
        failures = state.failed_auth
        address = client_address(request)
        if failures is not None:
            await failures.check(address)
        session = await run_in_threadpool(_live_session, state, value)
        if session is not None:
            return session
        if failures is not None:
            await failures.failed(address, "console session cookie of no live session")
    raise SignInRequired(back_path(request))


SessionDep = Annotated[OperatorSession, Depends(current_session)]


async def read_form(request: Request) -> dict[str, str]:
    """The URL-encoded form a request carries (first value of each field)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise FormRefusedError("the form is too large")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def check_origin(request: Request) -> None:
    """Refuse a form posted from a page of another host (when the browser says)."""
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise FormRefusedError(f"this form was posted from {origin}, not from the console")


def check_form(request: Request, form: dict[str, str], session: OperatorSession) -> None:
    """A form posted from a console page of this session; ``FormRefusedError`` else."""
    check_origin(request)
    if not hmac.compare_digest(form.get("csrf", ""), session.csrf_token):
        raise FormRefusedError(
            "this form is from an older page or another session; reload the page and try again"
        )


def secure_cookies(request: Request) -> bool:
    """Whether cookies go over HTTPS only: always when set, else when this request did."""
    return console_state(request).settings.console_secure_cookies or request.url.scheme == "https"


def secure_every_cookie(response: Response, request: Request) -> Response:
    """``response`` with every cookie it sets marked Secure when the session cookie is
    (a redirect's notice cookie too), so no console cookie crosses plain HTTP."""
    if secure_cookies(request):
        response.raw_headers = [
            (name, value + b"; Secure")
            if name == b"set-cookie" and b"; secure" not in value.lower()
            else (name, value)
            for name, value in response.raw_headers
        ]
    return response


def set_cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    """A console cookie: HttpOnly, SameSite=Strict, only for /console."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request),
    )


def new_sign_in_token() -> str:
    """The random value the sign-in form and its cookie both carry."""
    return secrets.token_urlsafe(24)
