"""Errors as RFC 9457 problem details: the one place errors become HTTP responses."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from types import MappingProxyType
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from common.documents import MAX_DEPTH
from common.errors import (
    AppDisabledError,
    AuthenticationError,
    AuthThrottledError,
    BatchRejectedError,
    DeliveryInFlightError,
    DeliveryNotFoundError,
    ExecutionNotFoundError,
    HandlerNotAllowedError,
    IdempotencyConflictError,
    IdempotencyKeyInUseError,
    InvalidTransitionError,
    JobHandlerForbiddenError,
    JobNotFoundError,
    JobQuotaExceededError,
    KairosError,
    RateLimitedError,
    RetriesOverLimitError,
    ScheduleTooFrequentError,
    StoreUnavailableError,
    TriggerBusyError,
    UnknownHandlerError,
    ValidationFailedError,
)
from services.api.problem_types import ProblemType, for_status

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"

_PHRASES = frozenset(status.value for status in HTTPStatus)

_TYPES: tuple[tuple[type[KairosError], ProblemType], ...] = (
    (AuthenticationError, ProblemType.UNAUTHORIZED),
    (AppDisabledError, ProblemType.APP_DISABLED),
    (BatchRejectedError, ProblemType.BATCH_REJECTED),
    (JobNotFoundError, ProblemType.JOB_NOT_FOUND),
    (ExecutionNotFoundError, ProblemType.EXECUTION_NOT_FOUND),
    (DeliveryNotFoundError, ProblemType.CALLBACK_NOT_FOUND),
    (DeliveryInFlightError, ProblemType.CALLBACK_IN_FLIGHT),
    (InvalidTransitionError, ProblemType.INVALID_TRANSITION),
    (TriggerBusyError, ProblemType.TRIGGER_BUSY),
    (IdempotencyKeyInUseError, ProblemType.IDEMPOTENCY_KEY_IN_USE),
    (RateLimitedError, ProblemType.RATE_LIMITED),
    (AuthThrottledError, ProblemType.AUTH_THROTTLED),
    (JobQuotaExceededError, ProblemType.JOB_QUOTA_EXCEEDED),
    (ScheduleTooFrequentError, ProblemType.SCHEDULE_TOO_FREQUENT),
    (RetriesOverLimitError, ProblemType.RETRIES_OVER_LIMIT),
    (IdempotencyConflictError, ProblemType.IDEMPOTENCY_CONFLICT),
    (JobHandlerForbiddenError, ProblemType.HANDLER_FORBIDDEN),
    (UnknownHandlerError, ProblemType.UNKNOWN_HANDLER),
    (HandlerNotAllowedError, ProblemType.HANDLER_NOT_ALLOWED),
    (ValidationFailedError, ProblemType.VALIDATION_FAILED),
    (StoreUnavailableError, ProblemType.STORE_UNAVAILABLE),
)


# Seconds a client is told to wait before retrying while a store is away.
RETRY_AFTER_SECONDS = 1

INSTANCE_PREFIX = "urn:kairos:request:"


def problem(
    kind: ProblemType,
    detail: str,
    request_id: str,
    headers: dict[str, str] | None = None,
    status: int | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem+json response of ``kind`` (``status`` overrides its status), whose
    ``instance`` names the request."""
    code, body, all_headers = _problem_parts(kind, detail, request_id, headers, status, extra)
    return JSONResponse(body, status_code=code, media_type=PROBLEM_JSON, headers=all_headers)


def encoded_problem(
    kind: ProblemType, detail: str, request_id: str, headers: dict[str, str]
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The problem ``problem`` answers, as the status, raw headers and body bytes an
    ASGI answer sends: for a gate that answers before Starlette builds a response."""
    code, body, all_headers = _problem_parts(kind, detail, request_id, headers, None, {})
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    raw = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in all_headers.items()
    ]
    raw += [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", b"%d" % len(content))]
    return code, raw, content


def _problem_parts(
    kind: ProblemType,
    detail: str,
    request_id: str,
    headers: dict[str, str] | None,
    status: int | None,
    extra: dict[str, Any],
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, body and headers of a problem of ``kind``."""
    code = status or kind.kind.status
    title = kind.kind.title if status is None else _title(kind, code)
    body = {
        "type": kind.kind.uri,
        "title": title,
        "status": code,
        "detail": detail,
        "instance": INSTANCE_PREFIX + request_id,
        **extra,
    }
    headers = dict(headers or {})
    if code == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if code == 503:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return code, body, headers


def _title(kind: ProblemType, status: int) -> str:
    if kind.kind.status == status:
        return kind.kind.title
    return HTTPStatus(status).phrase if status in _PHRASES else kind.kind.title


def request_id(scope: Scope) -> str:
    """The id ``services.api.request_ids.RequestIds`` gave the request of ``scope``."""
    state = scope.get("state") or {}
    return str(state.get("request_id", ""))


def _batch_entry(index: int, error: KairosError) -> dict[str, Any]:
    """One ``errors`` entry of a rejected batch, its field prefixed by ``jobs[index]``."""
    if isinstance(error, IdempotencyConflictError):
        field, message = "clientRequestId", str(error)
        return {"field": f"jobs[{index}].{field}", "message": message, "jobId": error.job_id}
    if isinstance(error, ValidationFailedError):
        return {"field": f"jobs[{index}].{error.field}", "message": error.message}
    return {"field": f"jobs[{index}]", "message": str(error)}


def _extra(exc: KairosError) -> dict[str, Any]:
    """The extension members a problem adds for this kind of error (``errors``,
    ``jobId``, ``jobStatus``, ``executionId``, ``deliveryId``, ``deliveryState``), as the
    Problem schema types them."""
    if isinstance(exc, BatchRejectedError):
        return {"errors": [_batch_entry(index, error) for index, error in exc.items]}
    if isinstance(exc, ValidationFailedError):
        return {"errors": [{"field": exc.field, "message": exc.message}]}
    if isinstance(exc, IdempotencyConflictError) and exc.job_id is not None:
        return {"jobId": exc.job_id}
    if isinstance(exc, InvalidTransitionError):
        return {"jobId": exc.job_id, "jobStatus": exc.status}
    if isinstance(exc, JobNotFoundError | TriggerBusyError | JobHandlerForbiddenError):
        return {"jobId": exc.job_id}
    if isinstance(exc, ExecutionNotFoundError):
        return {"executionId": exc.execution_id}
    if isinstance(exc, DeliveryNotFoundError):
        return {"deliveryId": exc.delivery_id}
    if isinstance(exc, DeliveryInFlightError):
        return {"deliveryId": exc.delivery_id, "deliveryState": exc.state}
    return {}


def _headers(exc: KairosError) -> dict[str, str]:
    if isinstance(exc, RateLimitedError | AuthThrottledError | JobQuotaExceededError):
        return {"Retry-After": str(exc.retry_after_seconds)}
    return {}


def _detail(exc: KairosError) -> str:
    """What the client reads; a store's host and driver message stay in the log."""
    if isinstance(exc, StoreUnavailableError):
        return _store_detail(exc.store)
    return str(exc)


async def _kairos_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, KairosError)
    rid = request_id(request.scope)
    for kind, problem_type in _TYPES:
        if isinstance(exc, kind):
            if isinstance(exc, StoreUnavailableError):
                log.warning("request %s: %s", rid, exc, extra={"request_id": rid})
            return problem(problem_type, _detail(exc), rid, _headers(exc), **_extra(exc))
    log.error("request %s: unmapped error %r", rid, exc, extra={"request_id": rid})
    return problem(ProblemType.INTERNAL_ERROR, _INTERNAL, rid)


_INTERNAL = (
    "the API met an error it did not expect (logged with this request's id); retry, and "
    "report the request id if it happens again"
)


def _unreadable_body(cause: BaseException, rid: str) -> JSONResponse:
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
    return problem(ProblemType.VALIDATION_FAILED, f"body: {message}", rid, errors=errors)


_STARLETTE_DETAILS = MappingProxyType(
    {
        404: "no such path; the operations are listed at /openapi.json and /docs",
        405: "this path does not take this method; the Allow header lists those it takes",
    }
)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no such route, method not allowed, unreadable body) as
    problem details, like every other error of the API."""
    assert isinstance(exc, StarletteHTTPException)
    rid = request_id(request.scope)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    if exc.status_code == 400 and exc.__cause__ is not None:
        return _unreadable_body(exc.__cause__, rid)
    detail = _STARLETTE_DETAILS.get(exc.status_code, str(exc.detail))
    kind = for_status(exc.status_code)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = getattr(request.app.state, "allowed_methods", None)
        methods = allowed.at(request.scope.get("path", "")) if allowed is not None else []
        if methods:  # else Starlette's own Allow (a path outside the /openapi routers)
            headers["Allow"] = ", ".join(methods)
    return problem(kind, detail, rid, headers, status=exc.status_code)


def _field_name(location: tuple[Any, ...]) -> str:
    """A request location as a field path: ``("body", "jobs", 3, "cronExpr")`` is
    ``jobs[3].cronExpr``; a header or query parameter is named as sent."""
    name = ""
    for part in location:
        if part in ("body", "query", "header", "path"):
            continue
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name or "body"


def _json_invalid(error: Mapping[str, Any], document: object) -> dict[str, str]:
    """A body that is not JSON, named as the body with where the reader stopped (line,
    column) and what it expected there, as ``json`` says it."""
    location = tuple(error.get("loc", ()))
    position = location[1] if len(location) > 1 and isinstance(location[1], int) else None
    expected = str(error.get("ctx", {}).get("error", "not JSON"))
    where = ""
    if position is not None and isinstance(document, str | bytes):
        text = document if isinstance(document, str) else document.decode(errors="replace")
        line = text.count("\n", 0, position) + 1
        column = position - text.rfind("\n", 0, position)
        where = f" at line {line}, column {column} (character {position + 1})"
    message = f"the body is not valid JSON: {expected}{where}"
    return {"field": "body", "message": message}


async def _request_invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        _json_invalid(e, exc.body)
        if e.get("type") == "json_invalid"
        else {"field": _field_name(tuple(e.get("loc", ()))), "message": e.get("msg", "invalid")}
        for e in exc.errors()
    ]
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    rid = request_id(request.scope)
    return problem(ProblemType.VALIDATION_FAILED, detail, rid, errors=errors)


def _store_detail(store: str) -> str:
    return (
        f"{store} is unavailable; retry later with the same Idempotency-Key (or "
        "clientRequestId): a create is never stored twice"
    )


async def _store_away(request: Request, exc: Exception) -> JSONResponse:
    store = "Redis" if isinstance(exc, RedisConnectionError | RedisTimeoutError) else "MySQL"
    rid = request_id(request.scope)
    reason = getattr(exc, "orig", None) or exc
    # The host and the driver's words help an operator, not a client: logged only.
    log.warning("request %s: %s did not answer: %s", rid, store, reason, extra={"request_id": rid})
    return problem(ProblemType.STORE_UNAVAILABLE, _store_detail(store), rid)


def install_problem_handlers(app: FastAPI) -> None:
    """Route Kairos errors, request validation errors and lost stores to problem details.

    A store that does not answer is a 503 with Retry-After, not a bare 500: the request
    is safe to retry (with its idempotency key, a create is never stored twice).
    """
    app.add_exception_handler(KairosError, _kairos_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _request_invalid)
    for lost in (OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError):
        app.add_exception_handler(lost, _store_away)
