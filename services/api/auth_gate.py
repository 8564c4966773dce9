"""Requests from a throttled address are refused before routing.

Once an API process knows an address is over its failed authentications
(``services.api.auth_failures``), its further /openapi requests with a key the process
has not seen work are answered 429 here, before body limits, routing and dependencies:
a flood from that address then costs the API as little as an answer can, and the
apps it shares the API with keep their latency. A key the process knows works (one in
the cache) goes on as usual, so an app behind the same NAT is not stopped.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from common.errors import AuthThrottledError
from services.api.auth_failures import client_address
from services.api.problem_types import ProblemType
from services.api.problems import problem, request_id
from services.api.state import ApiState

_BEARER = "bearer "


def _bearer_key(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[len(_BEARER) :].strip() if text[:7].lower() == _BEARER else ""
    return ""


class AuthGate:
    """ASGI middleware: 429 for /openapi requests of an address refused from memory."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 429 when the address is throttled and the key is not known to work."""
        failures = self.state.failed_auth
        if scope["type"] != "http" or failures is None or not failures.refusing_any():
            await self.app(scope, receive, send)
            return
        seconds = failures.refused_for(client_address(Request(scope)))
        if seconds is None or not scope["path"].startswith("/openapi/"):
            await self.app(scope, receive, send)
            return
        if self.state.known_key(_bearer_key(scope)):
            await self.app(scope, receive, send)
            return
        error = AuthThrottledError(seconds)
        answer = problem(
            ProblemType.AUTH_THROTTLED,
            str(error),
            request_id(scope),
            {"Retry-After": str(seconds)},
        )
        await answer(scope, receive, send)
