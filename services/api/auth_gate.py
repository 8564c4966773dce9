"""Requests from a throttled address are refused in front of the whole application.

Once an API process knows an address is over its failed authentications
(``services.api.auth_failures``), its further /openapi requests with a key the process
has not seen work are answered 429 here, in front of FastAPI's middleware stack: no
routing, no dependencies, no Starlette response, no Redis or MySQL call. The answer is
still a problem+json with ``Retry-After`` and a ``Request-Id``, and is counted in the
request metrics, as every other answer is. A flood from that address then costs the
API process little more than reading the request and writing the refusal, and the
apps it shares the event loop with keep their latency. A key the process knows works
(one in the cache) goes on as usual, so an app behind the same NAT is not stopped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from common.errors import AuthThrottledError
from common.metrics import observe_request
from services.api.auth_failures import FailedAuthentications, scope_address
from services.api.http_metrics import RouteTemplates
from services.api.problem_types import ProblemType
from services.api.problems import encoded_problem
from services.api.request_ids import given_request_id

_BEARER = "bearer "
_GATED_PREFIX = "/openapi/"


def bearer_key(scope: Scope) -> str:
    """The API key of the request's ``Authorization: Bearer`` header ("" when none)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[len(_BEARER) :].strip() if text[:7].lower() == _BEARER else ""
    return ""


class AuthGate:
    """ASGI middleware, outermost: 429 for /openapi requests of an address refused
    from memory."""

    def __init__(
        self,
        app: ASGIApp,
        failures: FailedAuthentications | None,
        known_key: Callable[[str], bool],
        routes: Sequence[BaseRoute],
    ) -> None:
        self.app = app
        self.failures = failures
        self.known_key = known_key
        self.templates = RouteTemplates(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 429 when the address is throttled and the key is not known to work."""
        seconds = self._refused_for(scope)
        if seconds is None:
            await self.app(scope, receive, send)
            return
        await self._refuse(scope, send, seconds)

    def _refused_for(self, scope: Scope) -> int | None:
        """The seconds the request's address stays refused; None when it goes on."""
        failures = self.failures
        if scope["type"] != "http" or failures is None or not failures.refusing_any():
            return None
        if not scope["path"].startswith(_GATED_PREFIX):
            return None
        seconds = failures.refused_for(scope_address(scope))
        if seconds is None or self.known_key(bearer_key(scope)):
            return None
        return seconds

    async def _refuse(self, scope: Scope, send: Send, seconds: int) -> None:
        """Send the 429 problem itself (with the request id ``RequestIds`` would give)
        and count it as ``RequestMetrics`` would."""
        began = time.perf_counter()
        rid = given_request_id(scope) or uuid.uuid4().hex
        headers = {"Retry-After": str(seconds)}
        detail = str(AuthThrottledError(seconds))
        status, raw, body = encoded_problem(ProblemType.AUTH_THROTTLED, detail, rid, headers)
        raw.append((b"request-id", rid.encode()))
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})
        route = self.templates.of(scope)
        observe_request(scope["method"], route, status, time.perf_counter() - began)
