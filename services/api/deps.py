"""Typed FastAPI dependencies: the process state and the calling app."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from common.db.apps import App
from common.errors import AppDisabledError, AuthenticationError
from services.api.auth_failures import client_address
from services.api.state import ApiState

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <apiKey>")


async def get_state(request: Request) -> ApiState:
    """The ``ApiState`` built at start-up (async: a sync dependency costs a thread hop)."""
    state: ApiState = request.app.state.kairos
    return state


StateDep = Annotated[ApiState, Depends(get_state)]


async def get_caller(
    request: Request,
    state: StateDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> App:
    """The app whose API key the request carries; 401 otherwise, 403 when the app is
    disabled; 429 when the app is over its rate limit (``services.api.rate_limit``) or
    its address failed authentication too often (``services.api.auth_failures``).

    A cached key is answered on the event loop; only a lookup in MySQL goes to a thread.
    """
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise AuthenticationError("send the app's API key as 'Authorization: Bearer <apiKey>'")
    app = state.cached_app(credentials.credentials)
    if app is None:
        app = await _look_up(request, state, credentials.credentials)
    if app.disabled:
        raise AppDisabledError(app.app_id)
    if state.rate_limiter is not None:
        await state.rate_limiter.take(app)
    return app


async def _look_up(request: Request, state: ApiState, api_key: str) -> App:
    """The app of a key the cache does not hold; an address over its failures is
    refused before the lookup (unless the key worked before), and a key MySQL does not
    know counts as a failure."""
    address = client_address(request)
    failures = state.failed_auth
    if failures is not None and not state.known_key(api_key):
        await failures.check(address)
    app = None
    if not state.known_miss(api_key):
        app = await run_in_threadpool(state.app_for_key, api_key)
    if app is None:
        if failures is not None:
            await failures.failed(address, "unknown API key")
        raise AuthenticationError(
            "the API key is not known, was revoked or has expired; ask an operator for a "
            "key (`kairos app create`, `kairos app rotate-key`)"
        )
    return app


CallerDep = Annotated[App, Depends(get_caller)]
