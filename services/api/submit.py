"""Submitting a single job: validate it, then store it with the others arriving now."""

from __future__ import annotations

import asyncio
import dataclasses

from fastapi.concurrency import run_in_threadpool

from common.db.apps import App
from common.db.jobs import NewJob
from common.errors import ValidationFailedError
from common.tracing.traceparent import parse_traceparent
from services.api.callback_screening import screen_callback_url
from services.api.idempotency import Submitted
from services.api.quotas import check_job_quota
from services.api.schemas import JobCreate
from services.api.state import ApiState
from services.api.validation import build_job


def merge_idempotency_key(body: JobCreate, header_key: str | None) -> JobCreate:
    """Take the Idempotency-Key header as clientRequestId; both given must agree."""
    if header_key is None:
        return body
    if body.clientRequestId is not None and body.clientRequestId != header_key:
        raise ValidationFailedError(
            "clientRequestId",
            "differs from the Idempotency-Key header; send one or make them equal",
        )
    return body.model_copy(update={"clientRequestId": header_key})


async def submit(
    state: ApiState, app: App, body: JobCreate, traceparent: str | None = None
) -> Submitted:
    """Store the job of a single create (or find its earlier twin).

    The job is stored with whatever other single creates wait at the same moment
    (``GroupInserter``): no transaction of its own per request. It is validated on the
    event loop while the handler list and the cluster clock are cached; when one of them
    needs MySQL or Redis, or the job has a cron to compute, in a worker thread, so
    neither a store that hangs nor CPU work holds the loop. Its callback URL is checked
    first, its host resolved off the loop (``callback_screening``); an app with a
    ``max_jobs`` quota has its stored jobs counted first (``quotas``). A valid
    ``traceparent`` (the header's value) is stored with the job, under the submit's span
    when spans are sent; an invalid one is ignored.
    """
    parent = parse_traceparent(traceparent)
    if parent is None:  # most creates: nothing to trace
        return await _submit(state, app, body, None)
    with state.tracing.span("kairos submit", parent, {"kairos.app": app.app_id}) as handed:
        return await _submit(state, app, body, handed)


async def _submit(state: ApiState, app: App, body: JobCreate, traceparent: str | None) -> Submitted:
    if body.callbackUrl:
        resolver = state.resolvers(app.id)
        await screen_callback_url(state.policy_for(app), resolver, body.callbackUrl)
    if app.limits.max_jobs is not None:
        await run_in_threadpool(_check_quota, state, app)
    if state.caches_fresh() and body.cronExpr is None:
        now, job = _build(state, app, body)
    else:
        now, job = await run_in_threadpool(_build, state, app, body)
    if traceparent is not None:
        job = dataclasses.replace(job, traceparent=traceparent)
    return await asyncio.wrap_future(state.inserter.submit(job, now, app.who))


def _check_quota(state: ApiState, app: App) -> None:
    with state.engine.connect() as conn:
        check_job_quota(conn, app, 1)


def _build(state: ApiState, app: App, body: JobCreate) -> tuple[int, NewJob]:
    now = state.clock.now_ms()
    job = build_job(body, app, state.known_handlers(), state.settings.max_params_bytes, now)
    return now, job
