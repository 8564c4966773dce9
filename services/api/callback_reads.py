"""A job's callback deliveries as its app sees them, one page at a time, and a replay
of one of them."""

from __future__ import annotations

import base64
import binascii
import re
from types import MappingProxyType

from common.db import jobs
from common.db.apps import App
from common.db.audit import audit_replays
from common.db.deliveries import AttemptRecord, DeliveryRecord
from common.db.delivery_store import MySqlDeliveryStore
from common.errors import (
    DeliveryInFlightError,
    DeliveryNotFoundError,
    JobNotFoundError,
    ValidationFailedError,
)
from common.states import DeliveryStatus
from common.timefmt import iso_ms
from services.api.schemas import (
    CallbackAttemptView,
    CallbackDeliveryView,
    CallbackList,
    CallbackReplayAccepted,
    CallbackState,
)
from services.api.state import ApiState

_CURSOR_TEXT = re.compile(r"d(\d{1,19})")

# QUEUED is Kairos's own step (confirmed in the notifier's queue, not tried yet): to the
# app it is PENDING, as is a delivery not yet handed over.
_STATES = MappingProxyType(
    {
        DeliveryStatus.PENDING: CallbackState.PENDING,
        DeliveryStatus.QUEUED: CallbackState.PENDING,
        DeliveryStatus.RETRYING: CallbackState.RETRYING,
        DeliveryStatus.DELIVERED: CallbackState.DELIVERED,
        DeliveryStatus.DEAD: CallbackState.DEAD,
    }
)


def encode_cursor(delivery_pk: int) -> str:
    """The opaque cursor after the delivery with this row id."""
    return base64.urlsafe_b64encode(f"d{delivery_pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The row id an ``encode_cursor`` cursor holds; 422 otherwise."""
    try:
        text = base64.b64decode(cursor + "=" * (-len(cursor) % 4), b"-_", validate=True)
        found = _CURSOR_TEXT.fullmatch(text.decode("ascii"))
    except (binascii.Error, ValueError):
        found = None
    if found is None or encode_cursor(int(found[1])) != cursor:
        raise ValidationFailedError("cursor", "not a cursor this API returned; start without it")
    return int(found[1])


def state_of(status: DeliveryStatus) -> CallbackState:
    """The state an app sees for a stored delivery status."""
    return _STATES[status]


def _attempt_view(attempt: AttemptRecord) -> CallbackAttemptView:
    return CallbackAttemptView(
        attempt=attempt.attempt,
        at=iso_ms(attempt.attempted_at) or "",
        statusCode=attempt.status_code,
        error=attempt.error,
        durationMs=attempt.duration_ms,
    )


def delivery_view(delivery: DeliveryRecord, attempts: list[AttemptRecord]) -> CallbackDeliveryView:
    """One delivery with its attempts."""
    state = state_of(delivery.status)
    return CallbackDeliveryView(
        deliveryId=delivery.delivery_id,
        executionId=delivery.execution_id or "",
        state=state,
        deadReason=delivery.dead_reason if state is CallbackState.DEAD else None,
        createdAt=iso_ms(delivery.created_at) or "",
        deliveredAt=iso_ms(delivery.delivered_at) if state is CallbackState.DELIVERED else None,
        nextAttemptAt=(
            iso_ms(delivery.next_attempt_at) if state is CallbackState.RETRYING else None
        ),
        attempts=[_attempt_view(a) for a in attempts],
    )


def list_callbacks(
    state: ApiState, app: App, job_id: int, limit: int, cursor: str | None
) -> CallbackList:
    """One page of the job's callback deliveries, newest first, with the next cursor."""
    before = decode_cursor(cursor) if cursor is not None else None
    with state.engine.connect() as conn:
        if jobs.get_job(conn, app.id, job_id) is None:
            raise JobNotFoundError(job_id)
        store = MySqlDeliveryStore(conn)
        rows = store.page_for_job(job_id, before, limit + 1)
        shown = rows[:limit]
        attempts = store.attempts_of([d.delivery_pk for d in shown])
    more = len(rows) > limit
    next_cursor = encode_cursor(shown[-1].delivery_pk) if more and shown else None
    views = [delivery_view(d, attempts[d.delivery_pk]) for d in shown]
    return CallbackList(jobId=job_id, deliveries=views, nextCursor=next_cursor)


def replay_callback(state: ApiState, app: App, delivery_id: str) -> CallbackReplayAccepted:
    """Start a DELIVERED or DEAD delivery of the app's again, on a fresh schedule: it is
    PENDING, and the dispatcher hands it to the notifier within seconds."""
    with state.engine.begin() as conn:
        store = MySqlDeliveryStore(conn)
        found = store.find_for_app(app.id, delivery_id)
        if (
            found is None
            or found.job_id is None
            or jobs.get_job(conn, app.id, found.job_id) is None
        ):
            raise DeliveryNotFoundError(delivery_id)
        now = state.clock.now_ms()
        if not store.start_again(delivery_id, now):
            raise DeliveryInFlightError(delivery_id, state_of(found.status))
        audit_replays(conn, app.who, [(delivery_id, app.id)], found.status.value, now)
    return CallbackReplayAccepted(deliveryId=delivery_id, state=CallbackState.PENDING)
