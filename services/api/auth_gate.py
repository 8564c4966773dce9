"""Requests from a throttled address are refused in front of the whole application.

Once an API process knows an address is over its failed authentications
(``services.api.auth_failures``), its further /openapi requests with a key the process
has not seen work are answered 429 here, in front of FastAPI's middleware stack: no
routing, no dependencies, no Starlette response, no Redis or MySQL call. The answer is
still a problem+json with ``Retry-After`` and a ``Request-Id``, and is counted in the
request metrics, as every other answer is. A flood from that address then costs the
API process little more than reading the request and writing the refusal. A key the
process knows works (one in the cache) goes on as usual, so an app behind the same NAT
is not stopped.

Even that is a read and a write per request, on the event loop every app shares: a
flood of ~1,000 requests a second took another app's p99 from 46 to 67 ms on a 2-core
box (bench/RESULTS.md). So the refusal is held back (``Tarpit``, 1 s by default): a
flooder waits for each answer on each of its connections, and its few connections send
a few requests a second. Only so many wait at once; past that, the answer goes at once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

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
# Refusals held back at once per process, most: a flood over many connections then
# holds a bounded number of them (and their memory), and the rest is answered at once.
MOST_HELD = 256


@dataclass
class Tarpit:
    """How long a refusal of a throttled address is held back (``seconds``, 0: not at
    all), with how many held at most at once."""

    seconds: float
    most_held: int = MOST_HELD
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    held: int = 0

    async def hold(self) -> None:
        """Wait ``seconds`` unless ``most_held`` refusals wait already."""
        if self.seconds <= 0 or self.held >= self.most_held:
            return
        self.held += 1
        try:
            await self.sleep(self.seconds)
        finally:
            self.held -= 1


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
        tarpit: Tarpit | None = None,
    ) -> None:
        self.app = app
        self.failures = failures
        self.known_key = known_key
        self.templates = RouteTemplates(routes)
        self.tarpit = tarpit or Tarpit(0)

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
        """Send the 429 problem itself (with the request id ``RequestIds`` would give),
        once the tarpit has held it, and count it as ``RequestMetrics`` would (the time
        held back not counted: it is no work of the API's)."""
        await self.tarpit.hold()
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
