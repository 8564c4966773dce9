"""Callback deliveries: recorded with the execution's final state, never lost."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.rows import AnyRow
from common.db.schema import callback_deliveries as deliveries
from common.states import DeliveryStatus


@dataclass(frozen=True)
class NewDelivery:
    """A callback to send for one finished execution."""

    delivery_id: str
    execution_id: str
    job_id: int
    app_pk: int
    url: str
    payload: str


def insert_deliveries(conn: Connection, rows: Sequence[NewDelivery], now_ms: int) -> None:
    """Record PENDING deliveries in one statement."""
    if not rows:
        return
    conn.execute(
        deliveries.insert(),
        [
            {
                "delivery_id": r.delivery_id,
                "execution_id": r.execution_id,
                "job_id": r.job_id,
                "app_id": r.app_pk,
                "url": r.url,
                "payload": r.payload,
                "status": DeliveryStatus.PENDING,
                "attempts": 0,
                "created_at": now_ms,
                "updated_at": now_ms,
            }
            for r in rows
        ],
    )


def mark_queued(conn: Connection, delivery_ids: Iterable[str], now_ms: int) -> None:
    """Record that these deliveries are confirmed in the callbacks queue."""
    ids = list(delivery_ids)
    if ids:
        conn.execute(
            deliveries.update()
            .where(
                deliveries.c.delivery_id.in_(ids),
                deliveries.c.status == DeliveryStatus.PENDING,
            )
            .values(status=DeliveryStatus.QUEUED, updated_at=now_ms)
        )


def stale_pending(
    conn: Connection, updated_before_ms: int, limit: int, lock: bool = False
) -> list[AnyRow]:
    """PENDING deliveries whose publish failed or never happened; with ``lock``, locked
    for the caller's transaction, passing over those another transaction holds."""
    query = (
        sa.select(deliveries)
        .where(
            deliveries.c.status == DeliveryStatus.PENDING,
            deliveries.c.updated_at < updated_before_ms,
        )
        .limit(limit)
    )
    if lock:
        query = query.with_for_update(skip_locked=True)
    return list(conn.execute(query).all())


def get_delivery(conn: Connection, delivery_id: str) -> AnyRow | None:
    """One delivery by its id."""
    return conn.execute(
        sa.select(deliveries).where(deliveries.c.delivery_id == delivery_id)
    ).first()


def record_attempt(
    conn: Connection,
    delivery_id: str,
    status: DeliveryStatus,
    status_code: int | None,
    error: str | None,
    now_ms: int,
) -> None:
    """Count one attempt and its outcome."""
    values: dict[str, Any] = {
        "status": status,
        "attempts": deliveries.c.attempts + 1,
        "last_status_code": status_code,
        "last_error": error,
        "updated_at": now_ms,
    }
    if status is DeliveryStatus.DELIVERED:
        values["delivered_at"] = now_ms
    conn.execute(
        deliveries.update().where(deliveries.c.delivery_id == delivery_id).values(**values)
    )


def list_for_job(conn: Connection, job_id: int) -> list[AnyRow]:
    """A job's callback deliveries, newest first."""
    return list(
        conn.execute(
            sa.select(deliveries)
            .where(deliveries.c.job_id == job_id)
            .order_by(deliveries.c.id.desc())
        ).all()
    )


def recent_for_job(conn: Connection, job_id: int, limit: int) -> list[AnyRow]:
    """A job's newest ``limit`` callback deliveries, newest first."""
    return list(
        conn.execute(
            sa.select(deliveries)
            .where(deliveries.c.job_id == job_id)
            .order_by(deliveries.c.id.desc())
            .limit(limit)
        ).all()
    )


def dead_deliveries(conn: Connection, limit: int) -> list[AnyRow]:
    """Deliveries parked after their last retry tier, most recently parked first."""
    return list(
        conn.execute(
            sa.select(deliveries)
            .where(deliveries.c.status == DeliveryStatus.DEAD)
            .order_by(deliveries.c.updated_at.desc())
            .limit(limit)
        ).all()
    )


def count_dead(conn: Connection) -> int:
    """How many deliveries are parked dead."""
    query = sa.select(sa.func.count()).where(deliveries.c.status == DeliveryStatus.DEAD)
    return int(conn.execute(query).scalar_one())


def mark_replayed(conn: Connection, delivery_ids: Iterable[str], now_ms: int) -> None:
    """Dead deliveries whose message went back to the callbacks queue are QUEUED again."""
    ids = list(delivery_ids)
    if ids:
        conn.execute(
            deliveries.update()
            .where(
                deliveries.c.delivery_id.in_(ids),
                deliveries.c.status == DeliveryStatus.DEAD,
            )
            .values(status=DeliveryStatus.QUEUED, updated_at=now_ms)
        )
