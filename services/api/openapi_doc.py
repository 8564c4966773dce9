"""The OpenAPI document as clients generate code from it: every status an operation can
answer, each error as ``application/problem+json`` with the one Problem schema, the
response headers, and links between operations.

Routes declare the problems of their own (``problem_responses(404, 409)``); what every
operation can answer is added here, in one place: 413 and 500 for any request (the body
limit and the crash guard sit before routing), 422 where a parameter or body is read,
and 401, 403, 429 and 503 for every call with an API key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from services.api.idempotency_header import HEADER as IDEMPOTENCY_KEY
from services.api.idempotency_header import REPLAYED_HEADER
from services.api.problems import PROBLEM_JSON
from services.api.schemas import Problem

Document = dict[str, Any]

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

_GENERIC: Mapping[int, str] = MappingProxyType(
    {
        401: "Missing, unknown or revoked API key (`WWW-Authenticate: Bearer`)",
        403: "The app is disabled",
        404: "No such resource",
        409: "Conflicts with the resource's state; nothing changed",
        413: "The request body is larger than KAIROS_MAX_BODY_BYTES; not read",
        422: "Invalid parameter, header or body (`errors` names each); nothing written",
        429: "The app is over its rate limit, or the client address failed authentication "
        "too often (retry after `Retry-After` seconds), or a create would pass its job "
        "quota",
        500: "An error the API did not expect; `instance` names the request to report",
        503: "MySQL or Redis did not answer (`detail` says which); retry after `Retry-After`",
    }
)

_HEADERS: dict[str, Document] = {
    "RequestId": {
        "description": "The request's id, also in a problem's `instance`; a `Request-Id` "
        "the client sent (1 to 128 of `A-Za-z0-9._:-`) is kept",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": 128},
    },
    "RetryAfter": {
        "description": "Seconds to wait before retrying",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    },
    "Location": {
        "description": "Where to read what the request created",
        "required": True,
        "schema": {"type": "string", "format": "uri-reference"},
    },
    "IdempotentReplayed": {
        "description": "`true` when this answer repeats the first answer to the same "
        "Idempotency-Key (or clientRequestId); absent on a first answer",
        "required": False,
        "schema": {"type": "string", "enum": ["true"]},
    },
    "WWWAuthenticate": {
        "description": "`Bearer`: send `Authorization: Bearer <apiKey>`",
        "required": True,
        "schema": {"type": "string"},
    },
}


def _ref(name: str) -> Document:
    return {"$ref": f"#/components/headers/{name}"}


def problem_responses(*statuses: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """Route ``responses`` for problems the route itself can answer; ``described`` gives
    a status (``s404="No such job"``) its own description."""
    found: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        description = described.get(f"s{status}", _GENERIC.get(status, "Error"))
        found[status] = {
            "description": description,
            "content": {PROBLEM_JSON: {"schema": _PROBLEM_REF}},
        }
    return found


# Links between operations, for clients and for stateful contract tests.
_JOB_FROM_BODY = {"jobId": "$response.body#/jobId"}
_JOB_OPERATIONS = (
    "getJob",
    "listJobExecutions",
    "pauseJob",
    "resumeJob",
    "triggerJob",
    "backfillJob",
    "cancelJob",
    "updateJob",
    "deleteJob",
    "listJobCallbacks",
)
_LINKS: dict[tuple[str, str], Document] = {
    ("createJob", "202"): {
        op: {"operationId": op, "parameters": _JOB_FROM_BODY} for op in _JOB_OPERATIONS
    },
    ("createJob", "200"): {
        op: {"operationId": op, "parameters": _JOB_FROM_BODY} for op in _JOB_OPERATIONS
    },
    ("createJobsBatch", "202"): {
        op: {"operationId": op, "parameters": {"jobId": "$response.body#/jobs/0/jobId"}}
        for op in ("getJob", "triggerJob", "deleteJob")
    },
    ("triggerJob", "202"): {
        "getExecution": {
            "operationId": "getExecution",
            "parameters": {"executionId": "$response.body#/executionId"},
        }
    },
    ("backfillJob", "202"): {
        "listJobExecutions": {
            "operationId": "listJobExecutions",
            "parameters": {"jobId": "$response.body#/jobId"},
        }
    },
}


def _universal(path: str, operation: Document) -> list[int]:
    """The statuses this operation can answer whatever its route says."""
    statuses = [413, 500]
    if operation.get("parameters") or operation.get("requestBody"):
        statuses.append(422)
    if path.startswith("/openapi/"):
        statuses += [401, 403, 429, 503]
    return statuses


def _without_null(parameter: Document) -> None:
    """An optional parameter is left out, never sent as null: drop FastAPI's null branch."""
    schema = parameter.get("schema", {})
    branches = schema.get("anyOf")
    if branches and {"type": "null"} in branches:
        kept = [b for b in branches if b != {"type": "null"}]
        del schema["anyOf"]
        if len(kept) == 1:
            schema.update(kept[0])
        else:
            schema["anyOf"] = kept


def _complete_operation(path: str, operation: Document) -> None:
    for parameter in operation.get("parameters", []):
        _without_null(parameter)
    body = operation.get("requestBody")
    if body is not None and not body.get("required", False):
        # An optional body is left out, as an optional parameter is (a trigger without
        # params): a generated client then sends none instead of a null.
        for media in body.get("content", {}).values():
            _without_null(media)
    responses: Document = operation["responses"]
    for status in _universal(path, operation):
        responses.setdefault(str(status), problem_responses(status)[status])
    for code, response in responses.items():
        content = response.get("content", {})
        if code[0] in "45" and PROBLEM_JSON not in content and path != "/readyz":
            response["content"] = {PROBLEM_JSON: {"schema": _PROBLEM_REF}}
        response["headers"] = _headers(code, operation)
        links = _LINKS.get((operation.get("operationId", ""), code))
        if links:
            response["links"] = links
    if path.startswith("/openapi/"):
        operation["security"] = [{"HTTPBearer": []}]


def _headers(code: str, operation: Document) -> Document:
    """The response headers of an answer with status ``code``."""
    headers = {"Request-Id": _ref("RequestId")}
    if code in ("429", "503"):
        headers["Retry-After"] = _ref("RetryAfter")
    if code == "401":
        headers["WWW-Authenticate"] = _ref("WWWAuthenticate")
    if code == "202":
        headers["Location"] = _ref("Location")
    if code in ("200", "202") and _takes_idempotency_key(operation):
        headers[REPLAYED_HEADER] = _ref("IdempotentReplayed")
    return headers


def _takes_idempotency_key(operation: Document) -> bool:
    return any(p.get("name") == IDEMPOTENCY_KEY for p in operation.get("parameters", []))


def _add_components(document: Document) -> None:
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem_schema.pop("$defs", {}))
    schemas["Problem"] = problem_schema
    components["headers"] = _HEADERS
    components.setdefault("securitySchemes", {})["HTTPBearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "`Authorization: Bearer <apiKey>` (`kairos app create`)",
    }


def build_document(app: FastAPI) -> Document:
    """The OpenAPI document of ``app``, completed as this module's docstring says."""
    document = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            _complete_operation(path, operation)
    _add_components(document)
    return document


def install_document(app: FastAPI) -> None:
    """Serve ``build_document`` at /openapi.json, built once on first use."""
    built: list[Document] = []

    def openapi() -> Document:
        if not built:
            built.append(build_document(app))
        return built[0]

    setter: Callable[[], Document] = openapi
    app.openapi = setter  # type: ignore[method-assign]
