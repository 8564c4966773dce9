"""Each API operation as a ``Call``: what to send and how to read the answer.

``Client`` and ``AsyncClient`` only send calls and wait; everything else about an
operation lives here once, so the two clients cannot drift apart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from kairos_client.callbacks import CallbackDelivery, deliveries_of
from kairos_client.enums import ExecutionStatus, JobStatus
from kairos_client.errors import ApiError, ResponseFormatError, api_error
from kairos_client.models import (
    BackfillAccepted,
    BatchAccepted,
    Execution,
    Job,
    JobAccepted,
    TriggerAccepted,
)
from kairos_client.problems import Problem
from kairos_client.retries import retry_after
from kairos_client.run_logs import RunLogPage
from kairos_client.specs import JobChanges, JobSpec, TriggerTime

T = TypeVar("T")
Query = list[tuple[str, str]]

JOBS = "/openapi/jobs"
MAX_KEY_LENGTH = 128


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reading of its successful answer.

    ``repeatable``: sending it twice does no more than sending it once (reads, PATCH,
    DELETE, requests with an ``Idempotency-Key``), so it may be sent again when its
    answer was lost. ``gone_is_done``: a 404 to a repeat means the first send did it.
    """

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    query: Query = field(default_factory=list)
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    repeatable: bool = False
    gone_is_done: bool = False

    def answer(self, response: httpx.Response, repeated: bool) -> T:
        """The result of a successful answer, or the ``ApiError`` of a failed one."""
        if response.is_success:
            return self.read(response)
        if repeated and self.gone_is_done and response.status_code == 404:
            return self.read(response)
        raise error_of(response)


def error_of(response: httpx.Response) -> ApiError:
    """The ``ApiError`` for an error answer, with its problem detail."""
    request_id = response.headers.get("request-id")
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    if isinstance(body, dict):
        problem = Problem.from_json(body, response.status_code)
    else:
        problem = Problem.from_text(response.status_code, response.reason_phrase, response.text)
    return api_error(problem, request_id, retry_after(response))


def _json(response: httpx.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError as e:
        what = f"{response.request.method} {response.request.url.path}"
        raise ResponseFormatError(f"{what} answered {response.status_code} without JSON") from e


def _replayed(response: httpx.Response) -> bool:
    return str(response.headers.get("idempotent-replayed", "")).lower() == "true"


def _job(response: httpx.Response) -> Job:
    return Job.from_json(_json(response))


def _execution(response: httpx.Response) -> Execution:
    return Execution.from_json(_json(response))


def _accepted(response: httpx.Response) -> JobAccepted:
    return JobAccepted.from_json(_json(response), _replayed(response))


def _batch(response: httpx.Response) -> BatchAccepted:
    return BatchAccepted.from_json(_json(response), _replayed(response))


def _triggered(response: httpx.Response) -> TriggerAccepted:
    return TriggerAccepted.from_json(_json(response), _replayed(response))


def _backfilled(response: httpx.Response) -> BackfillAccepted:
    return BackfillAccepted.from_json(_json(response))


def _deliveries(response: httpx.Response) -> tuple[list[CallbackDelivery], str | None]:
    return deliveries_of(_json(response))


def _nothing(response: httpx.Response) -> None:
    return None


def idempotency_header(key: str | None) -> dict[str, str]:
    """The ``Idempotency-Key`` header for ``key`` (a new random key when None), sent as
    a structured-field string so that the server reads back exactly ``key``."""
    key = str(uuid.uuid4()) if key is None else key
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not all(" " <= c <= "~" for c in key):
        raise ValueError("an idempotency key is 1 to 128 printable ASCII characters")
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return {"Idempotency-Key": f'"{escaped}"'}


def trace_header(traceparent: str | None) -> dict[str, str]:
    """The W3C ``traceparent`` header, when one is given. It is sent as it is: the
    server keeps a valid one and ignores one that is not (W3C trace context)."""
    return {} if traceparent is None else {"traceparent": traceparent}


def _job_path(job_id: int, action: str = "") -> str:
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise TypeError(f"a job id is an int, not {type(job_id).__name__}")
    return f"{JOBS}/{job_id}" + (f"/{action}" if action else "")


def create_job(
    spec: JobSpec, idempotency_key: str | None, traceparent: str | None = None
) -> Call[JobAccepted]:
    """``POST /openapi/jobs``. Without a key of its own (argument or the spec's
    ``client_request_id``), the request gets a random one, so a retry stores one job."""
    keyed_by_body = idempotency_key is None and spec.client_request_id is not None
    keyed = {} if keyed_by_body else idempotency_header(idempotency_key)
    return Call(
        "POST",
        JOBS,
        _accepted,
        body=spec.to_json(),
        headers=keyed | trace_header(traceparent),
        repeatable=True,
    )


def create_jobs(
    specs: Iterable[JobSpec], idempotency_key: str | None, traceparent: str | None = None
) -> Call[BatchAccepted]:
    """``POST /openapi/jobs/batch``: all or nothing, keyed as a whole."""
    return Call(
        "POST",
        f"{JOBS}/batch",
        _batch,
        body={"jobs": [spec.to_json() for spec in specs]},
        headers=idempotency_header(idempotency_key) | trace_header(traceparent),
        repeatable=True,
    )


def get_job(job_id: int, preview: int) -> Call[Job]:
    """``GET /openapi/jobs/{jobId}``, with the next ``preview`` trigger times."""
    query: Query = [("preview", str(preview))] if preview else []
    return Call("GET", _job_path(job_id), _job, query, repeatable=True)


def list_jobs_page(
    status: JobStatus | str | None,
    handler: str | None,
    name_prefix: str | None,
    page_size: int,
    cursor: str | None,
) -> Call[tuple[list[Job], str | None]]:
    """``GET /openapi/jobs``: one page of the app's jobs, newest first."""
    wanted = {"status": status, "handler": handler, "namePrefix": name_prefix, "cursor": cursor}
    query: Query = [(k, str(v)) for k, v in wanted.items() if v is not None]
    return Call(
        "GET",
        JOBS,
        _page_of(Job.from_json, "jobs"),
        [*query, ("limit", str(page_size))],
        repeatable=True,
    )


def list_executions_page(
    job_id: int,
    statuses: Iterable[ExecutionStatus | str],
    since: TriggerTime | None,
    page_size: int,
    cursor: str | None,
) -> Call[tuple[list[Execution], str | None]]:
    """``GET /openapi/jobs/{jobId}/executions``: one page, newest first."""
    query: Query = [("status", str(s)) for s in statuses]
    if since is not None:
        query.append(("since", _instant(since)))
    if cursor is not None:
        query.append(("cursor", cursor))
    query.append(("limit", str(page_size)))
    read = _page_of(Execution.from_json, "executions")
    return Call("GET", _job_path(job_id, "executions"), read, query, repeatable=True)


def _instant(value: TriggerTime) -> str:
    """A time as the API's ``since`` takes it: epoch ms for a datetime (naive is UTC)."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return str(int(aware.timestamp() * 1000))
    return str(value)


def _page_of(
    read_item: Callable[[Any, str], T], name: str
) -> Callable[[httpx.Response], tuple[list[T], str | None]]:
    def read(response: httpx.Response) -> tuple[list[T], str | None]:
        body = _json(response)
        if not isinstance(body, dict) or not isinstance(body.get(name), list):
            raise ResponseFormatError(f"expected an object with a {name!r} array")
        cursor = body.get("nextCursor")
        items = [read_item(item, f"{name}[{n}]") for n, item in enumerate(body[name])]
        return items, cursor if isinstance(cursor, str) and cursor else None

    return read


def get_execution(execution_id: str) -> Call[Execution]:
    """``GET /openapi/executions/{executionId}``."""
    path = f"/openapi/executions/{quote(str(execution_id), safe='')}"
    return Call("GET", path, _execution, repeatable=True)


def get_execution_logs(execution_id: str, after: int, limit: int) -> Call[RunLogPage]:
    """``GET /openapi/executions/{executionId}/logs``: lines past seq ``after``."""
    path = f"/openapi/executions/{quote(str(execution_id), safe='')}/logs"
    query = [("after", str(after)), ("limit", str(limit))]
    return Call("GET", path, _run_log_page, query=query, repeatable=True)


def _run_log_page(response: httpx.Response) -> RunLogPage:
    return RunLogPage.from_json(_json(response))


def job_action(job_id: int, action: str) -> Call[Job]:
    """``POST /openapi/jobs/{jobId}/{pause|resume|cancel}``: the job after the action.

    Not repeatable: a repeat of a pause whose answer was lost would be a 409."""
    return Call("POST", _job_path(job_id, action), _job)


def trigger(
    job_id: int,
    idempotency_key: str | None,
    params: Mapping[str, Any] | None = None,
    traceparent: str | None = None,
) -> Call[TriggerAccepted]:
    """``POST /openapi/jobs/{jobId}/trigger``: run now, with ``params`` for that run in
    place of the job's when given, and the caller's W3C ``traceparent``; keyed, so a
    retry runs it once."""
    return Call(
        "POST",
        _job_path(job_id, "trigger"),
        _triggered,
        body=None if params is None else {"params": dict(params)},
        headers=idempotency_header(idempotency_key) | trace_header(traceparent),
        repeatable=True,
    )


def backfill(job_id: int, from_time: TriggerTime, to_time: TriggerTime) -> Call[BackfillAccepted]:
    """``POST /openapi/jobs/{jobId}/backfill``: run the past trigger times in
    ``[from_time, to_time)`` that have none; a repeat creates nothing more, so it may
    be sent again."""
    body = {"from": _time_body(from_time), "to": _time_body(to_time)}
    return Call("POST", _job_path(job_id, "backfill"), _backfilled, body=body, repeatable=True)


def _time_body(value: TriggerTime) -> str | int:
    """A time as a request body gives it: ISO 8601 for a datetime (a naive one is a
    wall time in the job's zone), text or epoch ms as given."""
    return value.isoformat() if isinstance(value, datetime) else value


def update(job_id: int, changes: JobChanges) -> Call[Job]:
    """``PATCH /openapi/jobs/{jobId}``: the job as changed."""
    body = changes.to_json()
    return Call("PATCH", _job_path(job_id), _job, body=body, repeatable=True)


def delete(job_id: int) -> Call[None]:
    """``DELETE /openapi/jobs/{jobId}``; a repeat that finds the job gone is done."""
    return Call("DELETE", _job_path(job_id), _nothing, repeatable=True, gone_is_done=True)


def callbacks_page(
    job_id: int, cursor: str | None
) -> Call[tuple[list[CallbackDelivery], str | None]]:
    """``GET /openapi/jobs/{jobId}/callbacks``: the job's callback deliveries."""
    query: Query = [] if cursor is None else [("cursor", cursor)]
    return Call("GET", _job_path(job_id, "callbacks"), _deliveries, query, repeatable=True)


def replay_callback(delivery_id: str) -> Call[None]:
    """``POST /openapi/callbacks/{deliveryId}/replay``: send a DELIVERED or DEAD callback
    again on a fresh schedule (same webhook-id). Not repeated after a lost answer: the
    repeat would find the replay under way (409)."""
    if not isinstance(delivery_id, str) or not delivery_id:
        raise TypeError("a delivery id is a non-empty str (the callback's webhook-id)")
    return Call("POST", f"/openapi/callbacks/{quote(delivery_id, safe='')}/replay", _nothing)
