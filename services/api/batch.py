"""Submitting a batch of jobs all or nothing: validate every item, honour each item's
clientRequestId and the batch's Idempotency-Key, insert the new jobs with one
statement, wake the dispatcher once."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from common.db.apps import App
from common.db.idempotency_keys import KeyedRequest, StoredAnswer
from common.db.job_dependencies import insert_edges
from common.db.jobs import NewJob, insert_jobs
from common.documents import stored_size
from common.errors import (
    BatchRejectedError,
    IdempotencyConflictError,
    KairosError,
    ValidationFailedError,
)
from common.states import JobStatus
from common.tracing.spans import Attributes
from common.tracing.traceparent import parse_traceparent
from services.api.callback_screening import refused_callback_urls_from_thread
from services.api.created_audit import audit_created
from services.api.group_insert import refused_parents
from services.api.idempotency import Submitted, resolve_earlier
from services.api.keyed_requests import answer_once
from services.api.locations import job_location
from services.api.quotas import check_job_quota
from services.api.schemas import JobCreate
from services.api.state import ApiState
from services.api.store_refusals import as_refusal, refused_row_number
from services.api.validation import build_job, defaulted_fields
from services.api.wake import announce_created

log = logging.getLogger(__name__)

# One INSERT carries the whole batch, so it must stay well inside max_allowed_packet
# (16 MiB on MariaDB 10.11, 4 MiB on old MySQL): escaping can double the params' JSON.
MAX_BATCH_PARAMS_BYTES = 4 * 1024 * 1024

UNIQUE_REQUEST_KEY = "uq_jobs_app_client_request"

# The operation a batch's Idempotency-Key is remembered under.
BATCH = "createJobsBatch"

ItemErrors = list[tuple[int, KairosError]]


@dataclass(frozen=True)
class BatchAnswer:
    """What a batch create answers: the stored answer, and whether it repeats an
    earlier one (the batch's key was used before, or every item's clientRequestId)."""

    answer: StoredAnswer
    replayed: bool


def batch_hash(bodies: Sequence[JobCreate]) -> str:
    """A digest of the whole batch, to compare a keyed retry with the first request."""
    items = [body.model_dump(mode="json", exclude=defaulted_fields(body)) for body in bodies]
    canonical = json.dumps(items, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def submit_batch(
    state: ApiState,
    app: App,
    bodies: Sequence[JobCreate],
    key: str | None = None,
    traceparent: str | None = None,
) -> BatchAnswer:
    """Store every job of the batch, or none; one answer per item, in request order.

    An item whose clientRequestId the app used before with the same body maps to that
    job. Bad items are reported together in a ``BatchRejectedError`` and nothing is
    written: every invalid item or clientRequestId repeated in the batch; or, once all
    items are valid, every clientRequestId the app used before with another body. With
    ``key`` (the Idempotency-Key header) the whole answer is remembered and a repeat of
    the batch gets it back (``keyed_requests``). A batch whose new jobs would pass the
    app's ``max_jobs`` quota is refused whole (429). A valid ``traceparent`` is kept
    with every job of the batch (under the batch's submit span, when spans are sent).
    """
    parent = parse_traceparent(traceparent)
    if parent is None:
        return _submit_batch(state, app, bodies, key, None)
    attributes: Attributes = {"kairos.app": app.app_id, "kairos.jobs": len(bodies)}
    with state.tracing.span("kairos submit", parent, attributes) as handed:
        return _submit_batch(state, app, bodies, key, handed)


def _submit_batch(
    state: ApiState,
    app: App,
    bodies: Sequence[JobCreate],
    key: str | None,
    traceparent: str | None,
) -> BatchAnswer:
    urls = [body.callbackUrl for body in bodies]
    resolver = state.resolvers(app.id)
    refused = refused_callback_urls_from_thread(state.policy_for(app), resolver, urls)
    now = state.clock.now_ms()
    new_jobs = build_batch(state, app, bodies, now, refused)
    if traceparent is not None:
        new_jobs = [dataclasses.replace(job, traceparent=traceparent) for job in new_jobs]
    keyed = None if key is None else KeyedRequest(app.id, BATCH, key, batch_hash(bodies))
    stored: list[list[Submitted]] = []

    def work(conn: Connection) -> StoredAnswer:
        stored[:] = [_store(conn, app, new_jobs, now)]
        return _answer(stored[0])

    try:
        answer, replayed = answer_once(state, keyed, work)
    except IntegrityError as e:
        if UNIQUE_REQUEST_KEY not in str(e.orig):
            raise
        # A concurrent request took one of the clientRequestIds: it is found this time.
        answer, replayed = answer_once(state, keyed, work)
    if stored and not replayed:
        _announce(state, new_jobs, stored[0], now)
        replayed = not any(item.created for item in stored[0])
    return BatchAnswer(answer, replayed)


def _answer(items: Sequence[Submitted]) -> StoredAnswer:
    """The 202 of a stored batch; its Location names the first job."""
    jobs = [{"jobId": item.job_id, "status": str(item.status)} for item in items]
    location = job_location(items[0].job_id)
    return StoredAnswer(202, json.dumps({"jobs": jobs}), location, "")


def _announce(
    state: ApiState, new_jobs: Sequence[NewJob], answers: Sequence[Submitted], now_ms: int
) -> None:
    """Log the jobs this batch created and wake the dispatcher once for the soonest."""
    pairs = zip(new_jobs, answers, strict=True)
    created = [(job, answer.job_id) for job, answer in pairs if answer.created]
    announce_created(state, [job for job, _ in created], [i for _, i in created], now_ms)


def build_batch(
    state: ApiState,
    app: App,
    bodies: Sequence[JobCreate],
    now_ms: int,
    refused: Mapping[int, ValidationFailedError] | None = None,
) -> list[NewJob]:
    """Validate every item as a single create does; raise with all bad items, by index.

    ``refused`` holds the items whose callback URL the policy refused, by index
    (``callback_screening``).
    """
    refused = refused or {}
    handlers = state.known_handlers()
    max_params = state.settings.max_params_bytes
    built: list[NewJob] = []
    errors: ItemErrors = []
    for index, body in enumerate(bodies):
        try:
            built.append(build_job(body, app, handlers, max_params, now_ms))
            if index in refused:
                raise refused[index]
        except ValidationFailedError as e:
            errors.append((index, e))
    errors += repeated_request_ids(bodies)
    if errors:
        raise BatchRejectedError(sorted(errors, key=lambda item: item[0]))
    check_total_params(built)
    return built


def repeated_request_ids(bodies: Sequence[JobCreate]) -> ItemErrors:
    """Items whose clientRequestId an earlier item of the same batch already carries."""
    first_seen: dict[str, int] = {}
    errors: ItemErrors = []
    for index, body in enumerate(bodies):
        key = body.clientRequestId
        if key is None:
            continue
        if key in first_seen:
            message = f"{key!r} repeats jobs[{first_seen[key]}]; give each item its own"
            errors.append((index, ValidationFailedError("clientRequestId", message)))
        else:
            first_seen[key] = index
    return errors


def check_total_params(new_jobs: Sequence[NewJob]) -> None:
    """Refuse a batch whose params together are too large for one INSERT."""
    total = sum(stored_size(job.params) for job in new_jobs)
    if total > MAX_BATCH_PARAMS_BYTES:
        raise ValidationFailedError(
            "jobs",
            f"the items' params take {total} bytes as JSON together; a batch may carry "
            f"{MAX_BATCH_PARAMS_BYTES} bytes: split it into smaller batches",
        )


def _store(conn: Connection, app: App, new_jobs: Sequence[NewJob], now_ms: int) -> list[Submitted]:
    """In the caller's transaction: find the items created before, insert the others."""
    answers = earlier_jobs(conn, app, new_jobs)
    fresh = [index for index, answer in enumerate(answers) if answer is None]
    # Only the jobs the batch adds count: items its clientRequestIds found already do not.
    check_job_quota(conn, app, len(fresh))
    refused = refused_parents(conn, new_jobs, set(range(len(new_jobs))) - set(fresh))
    if refused:
        raise BatchRejectedError(sorted(refused.items()))
    try:
        ids = insert_jobs(conn, [new_jobs[index] for index in fresh], now_ms)
    except Exception as e:
        raise_refused_item(e, fresh)
        raise
    edges = zip(ids, (new_jobs[index].after for index in fresh), strict=True)
    insert_edges(conn, [(job_id, a) for job_id, after in edges for a in after])
    for index, job_id in zip(fresh, ids, strict=True):
        answers[index] = Submitted(job_id, JobStatus.WAITING, created=True)
    audit_created(conn, [(app.who, app.id, job_id) for job_id in ids], now_ms)
    return [answer for answer in answers if answer is not None]


def raise_refused_item(error: Exception, items: Sequence[int]) -> None:
    """Raise a 422 for the item whose row MySQL refused for its data (``items`` are the
    batch indexes of the statement's rows); return for any other error."""
    refusal = as_refusal(error)
    if refusal is None:
        return
    row = refused_row_number(error)
    if row is None or not 0 < row <= len(items):
        raise ValidationFailedError("jobs", refusal.message) from error
    raise BatchRejectedError([(items[row - 1], refusal)]) from error


def earlier_jobs(conn: Connection, app: App, new_jobs: Sequence[NewJob]) -> list[Submitted | None]:
    """Per item, the job its clientRequestId already names, else None.

    Raise, naming every such item, when a clientRequestId was used with another body or
    names the same job as an earlier item.
    """
    answers: list[Submitted | None] = []
    conflicts: ItemErrors = []
    first_item: dict[int, int] = {}
    for index, earlier in enumerate(resolve_earlier(conn, new_jobs)):
        if isinstance(earlier, IdempotencyConflictError):
            conflicts.append((index, earlier))
            earlier = None
        elif earlier is not None and first_item.setdefault(earlier.job_id, index) != index:
            message = (
                f"names the same job as jobs[{first_item[earlier.job_id]}]; give each item its own"
            )
            conflicts.append((index, ValidationFailedError("clientRequestId", message)))
        answers.append(earlier)
    if conflicts:
        raise BatchRejectedError(conflicts)
    return answers
