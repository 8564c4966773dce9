"""Errors as RFC 9457 problem details: the one place errors become HTTP responses."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.documents import MAX_DEPTH
from common.errors import (
    AuthenticationError,
    BatchRejectedError,
    HandlerNotAllowedError,
    IdempotencyConflictError,
    InvalidTransitionError,
    JobHandlerForbiddenError,
    JobNotFoundError,
    KairosError,
    RateLimitedError,
    StoreUnavailableError,
    TriggerBusyError,
    UnknownHandlerError,
    ValidationFailedError,
)

PROBLEM_JSON = "application/problem+json"

_PHRASES = {status.value for status in HTTPStatus}

_STATUS: list[tuple[type[KairosError], int, str]] = [
    (AuthenticationError, 401, "Unauthorized"),
    (BatchRejectedError, 422, "Invalid batch; nothing was written"),
    (JobNotFoundError, 404, "Job not found"),
    (InvalidTransitionError, 409, "Invalid transition"),
    (TriggerBusyError, 409, "Trigger time taken"),
    (RateLimitedError, 429, "Too many requests"),
    (IdempotencyConflictError, 422, "clientRequestId reused with a different body"),
    (JobHandlerForbiddenError, 403, "Handler not allowed"),
    (UnknownHandlerError, 422, "Unknown handler"),
    (HandlerNotAllowedError, 422, "Handler not allowed"),
    (ValidationFailedError, 422, "Invalid job"),
    (StoreUnavailableError, 503, "A store is unavailable"),
]


# Seconds a client is told to wait before retrying while a store is away.
RETRY_AFTER_SECONDS = 1


def problem(
    status: int, title: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    """A problem+json response."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status == 503:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _batch_entry(index: int, error: KairosError) -> dict[str, Any]:
    """One ``errors`` entry of a rejected batch, its field prefixed by ``jobs[index]``."""
    if isinstance(error, IdempotencyConflictError):
        field, message = "clientRequestId", str(error)
        return {"field": f"jobs[{index}].{field}", "message": message, "jobId": error.job_id}
    if isinstance(error, ValidationFailedError):
        return {"field": f"jobs[{index}].{error.field}", "message": error.message}
    return {"field": f"jobs[{index}]", "message": str(error)}


def _extra(exc: KairosError) -> dict[str, Any]:
    """The members a problem adds for this kind of error (``errors``, ``jobId``)."""
    if isinstance(exc, BatchRejectedError):
        return {"errors": [_batch_entry(index, error) for index, error in exc.items]}
    if isinstance(exc, ValidationFailedError):
        return {"errors": [{"field": exc.field, "message": exc.message}]}
    if isinstance(exc, IdempotencyConflictError):
        return {"jobId": exc.job_id}
    return {}


def _headers(exc: KairosError) -> dict[str, str]:
    if isinstance(exc, RateLimitedError):
        return {"Retry-After": str(exc.retry_after_seconds)}
    return {}


async def _kairos_error(_request: Request, exc: Exception) -> JSONResponse:
    for kind, status, title in _STATUS:
        if isinstance(exc, kind):
            assert isinstance(exc, KairosError)
            return problem(status, title, str(exc), _headers(exc), **_extra(exc))
    return problem(500, "Internal error", str(exc))


def _unreadable_body(cause: BaseException) -> JSONResponse:
    """A JSON body the reader gave up on (nested too deep, a number too long): a 422
    naming the body, as for any other JSON that cannot be read."""
    if isinstance(cause, RecursionError):
        message = (
            "the JSON nests too deep to read; objects and arrays may nest at most "
            f"{MAX_DEPTH} levels"
        )
    else:
        message = f"the JSON cannot be read ({cause})"
    errors = [{"field": "body", "message": message}]
    return problem(422, "Invalid request", f"body: {message}", errors=errors)


async def _http_error(_request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no such route, method not allowed, unreadable body) as
    problem details, like every other error of the API."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    if exc.status_code == 400 and exc.__cause__ is not None:
        return _unreadable_body(exc.__cause__)
    detail = str(exc.detail)
    title = HTTPStatus(exc.status_code).phrase if exc.status_code in _PHRASES else "Error"
    return problem(exc.status_code, title, detail, dict(exc.headers or {}))


def _field_name(location: tuple[Any, ...]) -> str:
    """A request location as a field path: ``("body", "jobs", 3, "cronExpr")`` is
    ``jobs[3].cronExpr``."""
    name = ""
    for part in location:
        if part == "body":
            continue
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name or "body"


async def _request_invalid(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"field": _field_name(tuple(e.get("loc", ()))), "message": e.get("msg", "invalid")}
        for e in exc.errors()
    ]
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return problem(422, "Invalid request", detail, errors=errors)


async def _store_away(_request: Request, exc: Exception) -> JSONResponse:
    store = "Redis" if isinstance(exc, RedisConnectionError | RedisTimeoutError) else "MySQL"
    reason = getattr(exc, "orig", None) or exc
    detail = (
        f"{store} did not answer ({reason}); retry later (a create that carries a "
        "clientRequestId is never stored twice)"
    )
    return problem(503, "A store is unavailable", detail)


def install_problem_handlers(app: FastAPI) -> None:
    """Route Kairos errors, request validation errors and lost stores to problem details.

    A store that does not answer is a 503 with Retry-After, not a bare 500: the request
    is safe to retry (with its clientRequestId, a create is never stored twice).
    """
    app.add_exception_handler(KairosError, _kairos_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _request_invalid)
    for lost in (OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError):
        app.add_exception_handler(lost, _store_away)
