"""Callback deliveries: recorded with the execution's final state, never lost."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db import driver
from common.db.rows import AnyRow
from common.db.schema import callback_attempts as attempts
from common.db.schema import callback_deliveries as deliveries
from common.db.schema import executions
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


def _deliveries(conn: Connection, query: sa.Select[*tuple[object, ...]]) -> list[DeliveryRecord]:
    return [DeliveryRecord.from_row(row) for row in conn.execute(query)]


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


def insert_deliveries(
    conn: Connection,
    rows: Sequence[NewDelivery],
    now_ms: int,
    status: DeliveryStatus = DeliveryStatus.PENDING,
) -> None:
    """Record deliveries in one statement: PENDING (to be published, by the caller or
    by the sweep of those left PENDING), or QUEUED by the results consumer that
    publishes them after its commit.

    Written in the driver's SQL (``common.db.driver``): the results consumer records a
    callback with each run, and SQLAlchemy Core bound its dozen values one by one.
    Integers go into the SQL text; strings are parameters.
    """
    if not rows:
        return
    params: list[str] = []
    values: list[str] = []
    fixed = f"%s, 0, {driver.ints((now_ms, now_ms))}"
    for r in rows:
        params += (r.delivery_id, r.url, r.payload)
        execution = "NULL" if r.execution_id is None else "%s"
        if r.execution_id is not None:
            params.append(r.execution_id)
        trace = "NULL" if r.traceparent is None else "%s"
        if r.traceparent is not None:
            params.append(r.traceparent)
        params.append(status.value)
        values.append(
            f"(%s, %s, %s, {execution}, {trace}, {driver.int_or_null(r.job_id)}, "
            f"{driver.int_or_null(r.app_pk)}, {driver.int_or_null(r.alert_rule_pk)}, {fixed})"
        )
    driver.execute(
        conn,
        "INSERT INTO callback_deliveries (delivery_id, url, payload, execution_id, "
        "traceparent, job_id, app_pk, alert_rule_pk, status, attempts, created_at, "
        f"updated_at) VALUES {', '.join(values)}",
        params,
    )


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
        """From a row of ``to_send_select``."""
        return cls(DeliveryRecord.from_row(row), bool(row.held))


def to_send_select() -> sa.Select[*tuple[object, ...]]:
    """Deliveries with ``held``: whether an earlier run of each one's job has a
    delivery still on its way; the caller adds which deliveries (its WHERE)."""
    run = executions.alias("run")
    earlier = deliveries.alias("earlier")
    earlier_run = executions.alias("earlier_run")
    held = (
        sa.select(earlier.c.id)
        .join(earlier_run, earlier_run.c.execution_id == earlier.c.execution_id)
        .where(
            earlier.c.job_id == deliveries.c.job_id,
            earlier.c.status.in_(UNSETTLED),
            sa.or_(
                earlier_run.c.trigger_time < run.c.trigger_time,
                sa.and_(
                    earlier_run.c.trigger_time == run.c.trigger_time,
                    earlier_run.c.id < run.c.id,
                ),
            ),
        )
        .exists()
    )
    return sa.select(deliveries, held.label("held")).select_from(
        deliveries.outerjoin(run, run.c.execution_id == deliveries.c.execution_id)
    )


# Built once: building its aliases anew costs more than the statement itself.
_TO_SEND = to_send_select().where(deliveries.c.delivery_id == sa.bindparam("delivery_id"))


def delivery_to_send(conn: Connection, delivery_id: str) -> DeliveryToSend | None:
    """One delivery by its id, and whether an earlier run of its job has a delivery
    PENDING, QUEUED or RETRYING, in one statement.

    Runs are ordered by their trigger time, then by their execution's row id (a retry
    of a trigger comes after its first attempt). The earlier deliveries are found
    through ``ix_callback_deliveries_job_status``: only the job's unsettled ones are
    read, however many it delivered before. A delivery whose execution is gone (pruned)
    neither waits nor holds another back.
    """
    row = conn.execute(_TO_SEND, {"delivery_id": delivery_id}).first()
    if row is None:
        return None
    return DeliveryToSend.from_row(row)


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


def record_attempt(conn: Connection, record: NewAttempt, now_ms: int) -> None:
    """Record one attempt and the delivery's state after it.

    A delivery already DELIVERED stays so: a late duplicate copy of its message (one
    redelivered after a lost connection) records its attempt but changes nothing else.
    The delivery's row is locked first, before the attempt's foreign key takes a shared
    lock on it: a shared lock raised to an exclusive one later deadlocks with a results
    consumer marking the same delivery QUEUED.
    """
    error = record.error[:MAX_ERROR_CHARS] if record.error is not None else None
    pk = conn.execute(
        sa.select(deliveries.c.id)
        .where(deliveries.c.delivery_id == record.delivery_id)
        .with_for_update()
    ).scalar()
    if pk is None:
        return
    conn.execute(
        attempts.insert().values(
            delivery_pk=pk,
            attempt=record.attempt,
            attempted_at=now_ms,
            status_code=record.status_code,
            error=error,
            duration_ms=record.duration_ms,
        )
    )
    values: dict[str, object] = {
        "status": record.status,
        "attempts": deliveries.c.attempts + 1,
        "last_status_code": record.status_code,
        "last_error": error,
        "updated_at": now_ms,
        "next_attempt_at": record.next_attempt_at,
        "dead_reason": record.dead_reason,
    }
    if record.status is DeliveryStatus.DELIVERED:
        values["delivered_at"] = now_ms
    conn.execute(
        deliveries.update()
        .where(deliveries.c.id == pk, deliveries.c.status != DeliveryStatus.DELIVERED)
        .values(**values)
    )


def attempts_of(conn: Connection, delivery_pks: Sequence[int]) -> dict[int, list[AttemptRecord]]:
    """The attempts of these deliveries (by delivery row id), oldest first."""
    found: dict[int, list[AttemptRecord]] = {pk: [] for pk in delivery_pks}
    if not delivery_pks:
        return found
    rows = conn.execute(
        sa.select(attempts)
        .where(attempts.c.delivery_pk.in_(list(delivery_pks)))
        .order_by(attempts.c.delivery_pk, attempts.c.id)
    ).all()
    for row in rows:
        attempt = AttemptRecord.from_row(row)
        found[attempt.delivery_pk].append(attempt)
    return found


def page_for_job(
    conn: Connection, job_id: int, before_pk: int | None, limit: int
) -> list[DeliveryRecord]:
    """Up to ``limit`` of a job's deliveries, newest first, older than ``before_pk``."""
    query = sa.select(deliveries).where(deliveries.c.job_id == job_id)
    if before_pk is not None:
        query = query.where(deliveries.c.id < before_pk)
    return _deliveries(conn, query.order_by(deliveries.c.id.desc()).limit(limit))


def find_for_app(conn: Connection, app_pk: int, delivery_id: str) -> DeliveryRecord | None:
    """The delivery with this id if it is one of the app's callbacks."""
    row = conn.execute(
        sa.select(deliveries).where(
            deliveries.c.delivery_id == delivery_id, deliveries.c.app_pk == app_pk
        )
    ).first()
    return DeliveryRecord.from_row(row) if row is not None else None


def start_again(conn: Connection, delivery_id: str, now_ms: int) -> bool:
    """Make a DEAD or DELIVERED delivery PENDING for a fresh schedule (a replay); False
    when it is neither (it is on its way already)."""
    result = conn.execute(
        deliveries.update()
        .where(
            deliveries.c.delivery_id == delivery_id,
            deliveries.c.status.in_([DeliveryStatus.DEAD, DeliveryStatus.DELIVERED]),
        )
        .values(
            status=DeliveryStatus.PENDING,
            next_attempt_at=None,
            dead_reason=None,
            delivered_at=None,
            updated_at=now_ms,
        )
    )
    return bool(result.rowcount)


def list_for_job(conn: Connection, job_id: int) -> list[DeliveryRecord]:
    """A job's callback deliveries, newest first."""
    query = sa.select(deliveries).where(deliveries.c.job_id == job_id)
    return _deliveries(conn, query.order_by(deliveries.c.id.desc()))


def recent_for_job(conn: Connection, job_id: int, limit: int) -> list[DeliveryRecord]:
    """A job's newest ``limit`` callback deliveries, newest first."""
    query = sa.select(deliveries).where(deliveries.c.job_id == job_id)
    return _deliveries(conn, query.order_by(deliveries.c.id.desc()).limit(limit))


def dead_deliveries(
    conn: Connection,
    limit: int,
    app_pk: int | None = None,
    app_pks: Collection[int] | None = None,
) -> list[DeliveryRecord]:
    """Deliveries parked after their last retry tier, most recently parked first; only
    the app's with ``app_pk``, and only those of the apps ``app_pks`` when given."""
    query = sa.select(deliveries).where(deliveries.c.status == DeliveryStatus.DEAD)
    if app_pk is not None:
        query = query.where(deliveries.c.app_pk == app_pk)
    if app_pks is not None:
        query = query.where(deliveries.c.app_pk.in_(sorted(app_pks) or [0]))
    return _deliveries(conn, query.order_by(deliveries.c.updated_at.desc()).limit(limit))


def count_dead(conn: Connection, app_pks: Collection[int] | None = None) -> int:
    """How many deliveries are parked dead (of the apps ``app_pks`` when given)."""
    query = sa.select(sa.func.count()).where(deliveries.c.status == DeliveryStatus.DEAD)
    if app_pks is not None:
        query = query.where(deliveries.c.app_pk.in_(sorted(app_pks) or [0]))
    return int(conn.execute(query).scalar_one())
