"""kairos callbacks: dead ones listed with their last error (by app, as JSON too), and
replayed by delivery, by job or all at once, with a count of what moved; a dead-letter
copy whose row was pruned is reported, one replayed another way dropped as stale."""

from __future__ import annotations

import json
import uuid
from typing import Any

import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.db.deliveries import NewAttempt, NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.jobs import NewJob, insert_jobs
from common.messages import CallbackMessage
from common.states import DeadReason, DeliveryStatus
from common.topology import CALLBACKS_DEAD_QUEUE, CALLBACKS_QUEUE, declare_core
from tests.integration.helpers import make_app


def job_of(engine: Engine, app_pk: int) -> int:
    with engine.begin() as conn:
        (job_id,) = insert_jobs(
            conn, [NewJob(app_pk, "cb", "demo.noop", {}, None, 1_000, "http://x/", None, None)], 0
        )
    return int(job_id)


def dead(
    engine: Engine, job_id: int, app_pk: int, status: DeliveryStatus = DeliveryStatus.DEAD
) -> str:
    delivery_id = "msg_" + uuid.uuid4().hex
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).insert_deliveries(
            [NewDelivery(delivery_id, str(uuid.uuid4()), job_id, app_pk, "http://x/", "{}")],
            0,
        )
        MySqlDeliveryStore(conn).record_attempts(
            [
                NewAttempt(
                    delivery_id,
                    8,
                    status,
                    503,
                    "HTTP 503",
                    20,
                    dead_reason=DeadReason.EXHAUSTED if status is DeliveryStatus.DEAD else None,
                )
            ],
            1_000,
        )
    return delivery_id


def status_of(engine: Engine, delivery_id: str) -> str | None:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT status FROM callback_deliveries WHERE delivery_id = :d"),
            {"d": delivery_id},
        ).scalar()
    return None if found is None else str(found)


def park(connection: BlockingConnection, delivery_ids: list[str]) -> None:
    channel = connection.channel()
    declare_core(channel)
    for delivery_id in delivery_ids:
        body = CallbackMessage(delivery_id=delivery_id, app_pk=1, url="http://x/", payload="{}")
        channel.basic_publish("", CALLBACKS_DEAD_QUEUE, body.model_dump_json().encode())
    channel.close()


def drain(connection: BlockingConnection, queue: str) -> list[str]:
    channel = connection.channel()
    found: list[str] = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            channel.close()
            return found
        found.append(CallbackMessage.model_validate_json(body).delivery_id)


def test_dead_callbacks_are_listed_with_their_last_error_by_app(cli: Any, engine: Engine) -> None:
    make_app(engine, "a")
    make_app(engine, "b")
    first = dead(engine, job_of(engine, 1), 1)
    dead(engine, job_of(engine, 2), 2)
    dead(engine, job_of(engine, 1), 1, DeliveryStatus.DELIVERED)
    status, out, _ = cli("callbacks", "dead", "--app", "a", "-o", "json")
    assert status == 0
    (shown,) = json.loads(out)["deliveries"]
    assert shown["deliveryId"] == first
    assert shown["appName"] == "a"
    assert shown["lastStatusCode"] == 503 and shown["lastError"] == "HTTP 503"
    assert shown["deadReason"] == "exhausted" and shown["attempts"] == 1
    status, out, _ = cli("callbacks", "dead")
    assert status == 0 and first in out and "HTTP 503" in out


def test_replay_by_delivery_and_by_job_counts_what_moved(cli: Any, engine: Engine) -> None:
    make_app(engine)
    job_id = job_of(engine, 1)
    one, two = dead(engine, job_id, 1), dead(engine, job_id, 1)
    other = dead(engine, job_of(engine, 1), 1)
    delivered = dead(engine, job_of(engine, 1), 1, DeliveryStatus.DELIVERED)
    status, out, _ = cli("callbacks", "replay", "--job", str(job_id))
    assert status == 0 and "replayed 2 callbacks" in out
    assert status_of(engine, one) == status_of(engine, two) == "PENDING"
    assert status_of(engine, other) == "DEAD"
    status, out, _ = cli("callbacks", "replay", "--delivery", delivered)
    assert status == 0 and "replayed 1 callbacks" in out
    assert status_of(engine, delivered) == "PENDING"
    status, out, err = cli("callbacks", "replay", "--delivery", one)
    assert status == 1 and "replayed 0" in out and "still on its way" in err


def test_replay_all_dead_moves_dead_copies_drops_stale_ones_and_reports_pruned(
    cli: Any, engine: Engine, connection: BlockingConnection
) -> None:
    make_app(engine)
    job_id = job_of(engine, 1)
    still_dead, replayed_before, pruned = (dead(engine, job_id, 1) for _ in range(3))
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE callback_deliveries SET status = 'PENDING' WHERE delivery_id = :d"),
            {"d": replayed_before},
        )
        conn.execute(
            sa.text("DELETE FROM callback_deliveries WHERE delivery_id = :d"), {"d": pruned}
        )
    park(connection, [still_dead, replayed_before, pruned, still_dead])
    status, out, err = cli("callbacks", "replay", "--all-dead")
    assert status == 0
    assert "replayed 1 dead-lettered callbacks" in out
    assert "dropped 2 stale copies" in out, "the copy replayed another way, and a duplicate"
    assert "1 messages in kairos.callbacks.dead belong to deliveries retention deleted" in err
    assert drain(connection, CALLBACKS_QUEUE) == [still_dead]
    assert drain(connection, CALLBACKS_DEAD_QUEUE) == [pruned]
    assert status_of(engine, still_dead) == "QUEUED"
