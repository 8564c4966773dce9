"""A manual trigger: run a job now, besides its schedule, at most once per
Idempotency-Key, with the job's params or with params for that run only.

The job row lock orders a trigger with cancel (no SCHEDULED execution of a CANCELLED
job); the key, taken in the same transaction, makes a retried trigger (a client that
timed out and sent it again) answer with the first execution instead of a second one.
"""

from __future__ import annotations

import hashlib
import json
import logging

from sqlalchemy.engine import Connection

from common.db import job_control as db
from common.db.apps import App
from common.db.audit import AuditEntry, record_audit
from common.db.idempotency_keys import KeyedRequest, StoredAnswer
from common.documents import JsonObject, stored_text
from common.tracing.spans import Tracing, branch
from common.tracing.traceparent import parse_traceparent
from services.api.job_control import TRIGGER, applies, check_may_run, status_of
from services.api.keyed_requests import answer_once
from services.api.locations import execution_location
from services.api.schemas import TriggerRequest
from services.api.state import ApiState
from services.api.validation import check_document
from services.api.wake import wake_dispatcher

log = logging.getLogger(__name__)

# The operation a trigger's Idempotency-Key is remembered under.
TRIGGER_OPERATION = "triggerJob"


def _keyed(
    app: App, job_id: int, key: str | None, body: TriggerRequest | None
) -> KeyedRequest | None:
    """The key's record; its digest names the job and the run's own params (members in
    any order), so the same key with other params is refused. A trigger without params
    digests as it always did, so keys stored before params existed still match."""
    if key is None:
        return None
    what = f"trigger:{job_id}"
    if body is not None and body.params is not None:
        what += ":" + json.dumps(body.params, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(what.encode()).hexdigest()
    return KeyedRequest(app.id, TRIGGER_OPERATION, key, digest)


def run_params(body: TriggerRequest | None, max_bytes: int) -> str | None:
    """The JSON text of a trigger's own params, checked as a job's are; None: the job's."""
    if body is None or body.params is None:
        return None
    check_document(body.params, max_bytes)
    return stored_text(body.params)


def _insert(
    conn: Connection,
    app: App,
    job_id: int,
    now: int,
    params: str | None,
    traceparent: str | None,
    tracing: Tracing,
) -> tuple[StoredAnswer, int]:
    job = db.lock_job(conn, app.id, job_id)
    applies(TRIGGER, job_id, status_of(job))
    assert job is not None
    check_may_run(app, job, "triggered")
    if traceparent is None and job.traceparent is not None:
        # No trace of its own: a branch of the job's trace, under a trigger span.
        traceparent = branch(tracing, job.traceparent, {"kairos.job_id": job_id})
    execution = db.insert_manual_execution(conn, job, now, params, traceparent)
    after: JsonObject = {"executionId": execution.execution_id}
    if params is not None:
        after["params"] = json.loads(params)
    entry = AuditEntry(app.who, "job.trigger", "job", str(job_id), app.id, None, after)
    record_audit(conn, [entry], now)
    body = {"jobId": job_id, "executionId": execution.execution_id, "status": execution.status}
    answer = StoredAnswer(202, json.dumps(body), execution_location(execution.execution_id), "")
    log.info(
        "job triggered by hand%s",
        " with its own params" if params is not None else "",
        extra={"job_id": job_id, "execution_id": execution.execution_id},
    )
    return answer, execution.scheduled_at


def trigger_job(
    state: ApiState,
    app: App,
    job_id: int,
    key: str | None = None,
    body: TriggerRequest | None = None,
    traceparent: str | None = None,
) -> tuple[StoredAnswer, bool]:
    """Run the job now: a SCHEDULED manual execution the dispatcher fires at once (a
    manual run never moves the job's own status), with ``body.params`` in place of the
    job's when given. With ``key``, a repeat gets the first answer back (second of the
    pair: True) and nothing runs again; the same key with other params is refused. A
    valid ``traceparent`` is the run's own (it wins over the job's); an invalid one is
    ignored."""
    params = run_params(body, state.settings.max_params_bytes)
    parent = parse_traceparent(traceparent)
    if parent is None:
        return _trigger(state, app, job_id, key, body, params, None)
    with state.tracing.span("kairos trigger", parent, {"kairos.job_id": job_id}) as handed:
        return _trigger(state, app, job_id, key, body, params, handed)


def _trigger(
    state: ApiState,
    app: App,
    job_id: int,
    key: str | None,
    body: TriggerRequest | None,
    params: str | None,
    traceparent: str | None,
) -> tuple[StoredAnswer, bool]:
    now = state.clock.now_ms()
    scheduled: list[int] = []

    def work(conn: Connection) -> StoredAnswer:
        answer, at = _insert(conn, app, job_id, now, params, traceparent, state.tracing)
        scheduled[:] = [at]
        return answer

    answer, replayed = answer_once(state, _keyed(app, job_id, key, body), work)
    if scheduled and not replayed:
        wake_dispatcher(state, scheduled[0], now)
    return answer, replayed
