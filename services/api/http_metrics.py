"""Requests by route and status, and how long each took: ASGI middleware feeding
``kairos_api_requests_total`` and ``kairos_api_request_duration_seconds``.

Routes are labelled by their template (``/openapi/jobs/{jobId}``), never by the path
itself, so the series stay few whatever ids clients send; a path no route serves is
``<unmatched>``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.metrics import observe_request

UNMATCHED = "<unmatched>"
# Paths answered before routing whose template is remembered; more start afresh.
MAX_REMEMBERED_PATHS = 1_000


def route_template(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that served (or would serve) the request."""
    route = scope.get("route")
    if route is None:
        route = _matching_route(scope, routes)
    # ``path_format`` drops the convertors: ``{jobId}``, not ``{jobId:int}``.
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(template or UNMATCHED)


def _flat(routes: Sequence[BaseRoute]) -> Iterator[BaseRoute]:
    """The routes themselves, those of included routers too (FastAPI keeps an included
    router as one entry that holds its original router)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _flat(inner.routes)
        else:
            yield route


def _matching_route(scope: Scope, routes: Sequence[BaseRoute]) -> BaseRoute | None:
    """For a request answered before routing (a body over the limit): the route it was
    for, as the router would pick it (a full match, else the first partial one)."""
    partial = None
    for candidate in _flat(routes):
        match, _ = candidate.matches(scope)
        if match is Match.FULL:
            return candidate
        if match is Match.PARTIAL and partial is None:
            partial = candidate
    return partial


class RouteTemplates:
    """``route_template`` for the requests of one app, the template of a request
    answered before routing remembered by method and path: a flood refused at the door
    sends the same few paths, and matching one against every route costs more than
    the refusal itself."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self.routes = routes
        self._unrouted: dict[tuple[str, str], str] = {}

    def of(self, scope: Scope) -> str:
        """The template of the route that served (or would serve) ``scope``."""
        if scope.get("route") is not None:
            return route_template(scope, self.routes)
        key = (scope.get("method", ""), scope["path"])
        template = self._unrouted.get(key)
        if template is None:
            template = route_template(scope, self.routes)
            if len(self._unrouted) >= MAX_REMEMBERED_PATHS:
                self._unrouted.clear()
            self._unrouted[key] = template
        return template


class RequestMetrics:
    """ASGI middleware: count each answered request and observe its duration."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.templates = RouteTemplates(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, then count it by method, route template and status."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            route = self.templates.of(scope)
            observe_request(scope["method"], route, status, time.perf_counter() - began)
