"""The FastAPI application, built from explicit settings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import redis
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from common.callback_urls import CallbackUrlPolicy, Resolver
from common.clock import ClusterClock
from common.config import ApiSettings
from common.db.engine import make_engine
from common.gc_freeze import freeze_startup_heap
from common.keys import RedisKeys
from common.tracing.spans import start_tracing
from services.api.allow import AllowedMethods
from services.api.auth_failures import build_failed_authentications
from services.api.auth_gate import AuthGate, Tarpit
from services.api.body_limit import BodyLimit
from services.api.callback_screening import ResolverPerApp, system_resolver
from services.api.console import install_console
from services.api.docs_pages import install_docs_pages
from services.api.group_insert import GroupInserter
from services.api.http_metrics import RequestMetrics
from services.api.openapi_doc import install_document
from services.api.problems import install_problem_handlers
from services.api.rate_limit import build_rate_limiter
from services.api.request_ids import RequestIds
from services.api.routes import callbacks, executions, health, job_control, jobs
from services.api.state import ApiState
from services.api.wake import announce_created


def _build_state(settings: ApiSettings, resolvers: ResolverPerApp) -> ApiState:
    client = redis.Redis.from_url(settings.redis_url)
    keys = RedisKeys(settings.namespace)
    state = ApiState(
        settings=settings,
        engine=make_engine(settings, pool_size=20),
        redis=client,
        clock=ClusterClock(client),
        keys=keys,
        rate_limiter=build_rate_limiter(
            settings.redis_url,
            keys,
            settings.rate_limit_per_second,
            settings.rate_limit_burst,
        ),
        callback_policy=CallbackUrlPolicy.from_settings(
            settings.callback_allowed_networks, settings.callback_https_only
        ),
        resolvers=resolvers,
        tracing=start_tracing("api", settings.otel_endpoint),
    )
    state.failed_auth = build_failed_authentications(
        settings.redis_url, keys, settings.auth_failure_limit, settings.auth_failure_window_seconds
    )
    state.inserter = GroupInserter(state.engine, partial(announce_created, state))
    return state


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Routes, schemas and clients exist by now and live as long as the process.
    freeze_startup_heap()
    yield
    state: ApiState = app.state.kairos
    state.inserter.stop()
    state.engine.dispose()
    state.redis.close()
    if state.rate_limiter is not None:
        await state.rate_limiter.close()
    if state.failed_auth is not None:
        await state.failed_auth.close()


class GatedApi(FastAPI):
    """FastAPI with the auth gate (``services.api.auth_gate``) in front of it, FastAPI's
    own entry and middleware stack too: a throttled address's flood is refused before
    any of them runs."""

    gate: AuthGate | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope`` through the gate (built at the first request, when the
        routes and the process state are all in place)."""
        if self.gate is None:
            state: ApiState = self.state.kairos
            routes = self.router.routes
            self.gate = AuthGate(
                super().__call__,
                state.failed_auth,
                state.known_key,
                routes,
                Tarpit(state.settings.auth_tarpit_seconds),
            )
        await self.gate(scope, receive, send)


def create_app(
    settings: ApiSettings, new_resolver: Callable[[], Resolver] = system_resolver
) -> FastAPI:
    """Build the API with its own engine, Redis clients and cluster clock.

    They are built here (not at import) and closed when the app shuts down.
    ``new_resolver`` builds the resolver of one app's callback URL hosts, once per app
    (the system's, each answer kept 30 s, by default).
    """
    app = GatedApi(
        title="Kairos OpenAPI",
        version="1",
        description=(
            "Submit one-shot and cron jobs; read their status and executions. "
            "Every /openapi call needs `Authorization: Bearer <apiKey>`. Errors are "
            "RFC 9457 problem details (`application/problem+json`) whose `type` is a "
            "stable `urn:kairos:problem:<name>`; every answer carries a `Request-Id`."
        ),
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.kairos = _build_state(settings, ResolverPerApp(new_resolver))
    install_problem_handlers(app)
    # Outside routing and authentication: a large body is refused before either.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    # Outside the body limit, so a 413 is counted too.
    app.add_middleware(RequestMetrics, routes=app.router.routes)
    # Outermost: every answer, a 413 or a crash's 500 too, carries the request id.
    app.add_middleware(RequestIds)
    routers = (
        jobs.router,
        job_control.router,
        executions.router,
        callbacks.router,
        health.router,
    )
    for router in routers:
        app.include_router(router)
    app.state.allowed_methods = AllowedMethods(routers)
    install_console(app)
    install_docs_pages(app)
    install_document(app)
    return app
