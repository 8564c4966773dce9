"""Callback deliveries as records: a delivery to make, one as stored, an attempt to
record and one recorded, and what a callback says of its job (``job_labels``).
Their reads and writes are the deliveries aggregate's (``common.db.delivery_store``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.db import driver
from common.db.rows import AnyRow
from common.states import DeadReason, DeliveryStatus

MAX_ERROR_CHARS = 4096


@dataclass(frozen=True)
class NewDelivery:
    """A callback to send for one finished execution, or an alert (no execution, job
    or app: ``alert_rule_pk``, the rule whose secret signs it)."""

    delivery_id: str
    execution_id: str | None
    job_id: int | None
    app_pk: int | None
    url: str
    payload: str
    # The run's W3C traceparent, sent as a header with each POST; None: not traced.
    traceparent: str | None = None
    alert_rule_pk: int | None = None
    # No other callback of its job was on its way when it was recorded, nor recorded
    # with it: its message may be sent without a read of its row (``CallbackMessage``).
    alone: bool = False


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """A ``callback_deliveries`` row: one callback, where it stands, its last answer."""

    delivery_pk: int
    """Its row id (``callback_deliveries.id``): attempts and page cursors refer to it."""
    delivery_id: str
    execution_id: str | None
    """None for an alert, as ``job_id`` and ``app_pk``."""
    job_id: int | None
    app_pk: int | None
    url: str
    payload: str
    status: DeliveryStatus
    attempts: int
    last_status_code: int | None
    last_error: str | None
    created_at: int
    updated_at: int
    delivered_at: int | None
    next_attempt_at: int | None
    dead_reason: DeadReason | None
    traceparent: str | None = None
    # The alert rule of an alert; None: a callback.
    alert_rule_pk: int | None = None

    @classmethod
    def from_row(cls, row: AnyRow) -> DeliveryRecord:
        """The delivery a ``select(callback_deliveries)`` row holds."""
        reason = row.dead_reason
        return cls(
            delivery_pk=row.id,
            delivery_id=row.delivery_id,
            execution_id=row.execution_id,
            job_id=row.job_id,
            app_pk=row.app_pk,
            url=row.url,
            payload=row.payload,
            status=DeliveryStatus(row.status),
            attempts=row.attempts,
            last_status_code=row.last_status_code,
            last_error=row.last_error,
            created_at=row.created_at,
            updated_at=row.updated_at,
            delivered_at=row.delivered_at,
            next_attempt_at=row.next_attempt_at,
            dead_reason=DeadReason(reason) if reason is not None else None,
            traceparent=row.traceparent,
            alert_rule_pk=row.alert_rule_pk,
        )

    def as_new(self) -> NewDelivery:
        """The delivery as first recorded, to hand the notifier again."""
        return NewDelivery(
            self.delivery_id,
            self.execution_id,
            self.job_id,
            self.app_pk,
            self.url,
            self.payload,
            self.traceparent,
            self.alert_rule_pk,
        )


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """A ``callback_attempts`` row: one POST of a delivery and how it went."""

    delivery_pk: int
    attempt: int
    attempted_at: int
    status_code: int | None
    error: str | None
    duration_ms: int

    @classmethod
    def from_row(cls, row: AnyRow) -> AttemptRecord:
        """The attempt a ``select(callback_attempts)`` row holds."""
        return cls(
            delivery_pk=row.delivery_pk,
            attempt=row.attempt,
            attempted_at=row.attempted_at,
            status_code=row.status_code,
            error=row.error,
            duration_ms=row.duration_ms,
        )


@dataclass(frozen=True)
class JobLabel:
    """What a callback says of its job besides its id."""

    job_name: str
    client_request_id: str | None


# For a job read as gone in the same transaction (cannot happen while it is locked).
UNLABELLED = JobLabel("", None)


def job_labels(conn: Connection, job_ids: Iterable[int]) -> dict[int, JobLabel]:
    """The name and client request id of each of these jobs, in one query."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    rows = driver.fetch(
        conn,
        f"SELECT id, job_name, client_request_id FROM jobs WHERE id IN ({driver.ints(ids)})",
    )
    return {int(r.id): JobLabel(r.job_name, r.client_request_id) for r in rows}


# Deliveries still on their way: a job's later callback waits behind one of these.
UNSETTLED = (DeliveryStatus.PENDING, DeliveryStatus.QUEUED, DeliveryStatus.RETRYING)


@dataclass(frozen=True, slots=True)
class DeliveryToSend:
    """A delivery as the notifier reads it before an attempt, and whether an earlier
    run of its job has a callback still on its way (``held``): this one waits for it."""

    record: DeliveryRecord
    held: bool

    @classmethod
    def from_row(cls, row: AnyRow) -> DeliveryToSend:
        """From a row of the delivery store's read before an attempt (``deliveries_to_send``)."""
        return cls(DeliveryRecord.from_row(row), bool(row.held))


@dataclass(frozen=True)
class NewAttempt:
    """One POST of a callback, and what the delivery became after it."""

    delivery_id: str
    attempt: int
    status: DeliveryStatus
    status_code: int | None
    error: str | None
    duration_ms: int
    next_attempt_at: int | None = None
    dead_reason: DeadReason | None = None
