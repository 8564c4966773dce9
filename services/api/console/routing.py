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
    ExecutionNotStuckError,
    JobNotFoundError,
    KairosError,
    StoreUnavailableError,
    UnknownAppError,
)
from services.api.console.render import page, redirect
from services.api.console.session import FormRefusedError, SignInRequired

log = logging.getLogger(__name__)

_STORE_ERRORS = (
    OperationalError,
    InterfaceError,
    RedisConnectionError,
    RedisTimeoutError,
    StoreUnavailableError,
)


def _status(error: KairosError) -> int:
    if isinstance(error, JobNotFoundError | ExecutionNotStuckError | UnknownAppError):
        return 404
    if isinstance(error, FormRefusedError):
        return 403
    return 409


def problem_page(request: Request, status: int, title: str, detail: str) -> Response:
    """An error page in the console's frame."""
    return page(request, "error.html", status, title=title, detail=detail)


class ConsoleRoute(APIRoute):
    """An APIRoute whose errors become console pages instead of problem+json."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, wrapped so that every error becomes a page."""
        handle = super().get_route_handler()

        async def handle_as_page(request: Request) -> Response:
            try:
                return await handle(request)
            except SignInRequired as e:
                return redirect(f"/console/login?next={quote(e.back_to)}")
            except RequestValidationError as e:
                fields = "; ".join(str(err.get("msg")) for err in e.errors())
                return problem_page(request, 422, "Not a valid request", fields)
            except KairosError as e:
                if isinstance(e, StoreUnavailableError):
                    return problem_page(request, 503, "A store is unavailable", str(e))
                return problem_page(request, _status(e), "Not done", str(e))
            except _STORE_ERRORS as e:
                log.warning("console page %s: a store did not answer: %s", request.url.path, e)
                detail = f"{type(e).__name__}: {getattr(e, 'orig', None) or e}"
                return problem_page(request, 503, "A store did not answer", detail)

        return handle_as_page
