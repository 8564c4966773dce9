"""Console routes answer in HTML whatever happens: a missing session sends the browser
to sign in, a refused form or a store that does not answer is a page that says so."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import InterfaceError, OperationalError

from common.errors import (
    AuthThrottledError,
    ExecutionNotFoundError,
    ExecutionNotStuckError,
    JobNotFoundError,
    KairosError,
    StoreUnavailableError,
    UnknownAppError,
)
from common.operator_roles import EveryAppRequiredError, RoleRequiredError
from services.api.console.render import page, redirect
from services.api.console.session import FormRefusedError, SignInRequired, secure_every_cookie
from services.api.request_ids import request_id

log = logging.getLogger(__name__)

_STORE_ERRORS = (
    OperationalError,
    InterfaceError,
    RedisConnectionError,
    RedisTimeoutError,
    StoreUnavailableError,
)


def _status(error: KairosError) -> int:
    if isinstance(
        error, JobNotFoundError | ExecutionNotFoundError | ExecutionNotStuckError | UnknownAppError
    ):
        return 404
    if isinstance(error, FormRefusedError | RoleRequiredError | EveryAppRequiredError):
        return 403
    if isinstance(error, AuthThrottledError):
        return 429
    return 409


def problem_page(request: Request, status: int, title: str, detail: str) -> Response:
    """An error page in the console's frame."""
    return page(request, "error.html", status, title=title, detail=detail)


def store_away_page(request: Request, store: str, error: Exception) -> Response:
    """503 naming the store; its address and the driver's words go to the log only (the
    page may be shown before anyone signed in), under the request id the page shows."""
    rid = request_id(request.scope)
    log.warning(
        "console page %s (request %s): %s did not answer: %s",
        request.url.path,
        rid,
        store,
        getattr(error, "orig", None) or error,
        extra={"request_id": rid},
    )
    detail = f"{store} did not answer; try again shortly. The API's log has why (request {rid})."
    return problem_page(request, 503, "A store did not answer", detail)


class ConsoleRoute(APIRoute):
    """An APIRoute whose errors become console pages instead of problem+json."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, wrapped so that every error becomes a page."""
        handle = super().get_route_handler()

        async def handle_as_page(request: Request) -> Response:
            return secure_every_cookie(await answer(request), request)

        async def answer(request: Request) -> Response:
            try:
                return await handle(request)
            except SignInRequired as e:
                return redirect(f"/console/login?next={quote(e.back_to)}")
            except RequestValidationError as e:
                fields = "; ".join(str(err.get("msg")) for err in e.errors())
                return problem_page(request, 422, "Not a valid request", fields)
            except StoreUnavailableError as e:
                return store_away_page(request, e.store, e)
            except KairosError as e:
                response = problem_page(request, _status(e), "Not done", str(e))
                if isinstance(e, AuthThrottledError):
                    response.headers["Retry-After"] = str(e.retry_after_seconds)
                return response
            except _STORE_ERRORS as e:
                store = (
                    "Redis" if isinstance(e, RedisConnectionError | RedisTimeoutError) else "MySQL"
                )
                return store_away_page(request, store, e)

        return handle_as_page
