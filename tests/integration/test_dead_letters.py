"""Replaying dead-lettered callbacks: all of them or one, around what cannot be read."""

from __future__ import annotations

import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.schema import callback_deliveries, jobs
from common.messages import CallbackMessage
from common.states import DeliveryStatus
from common.topology import CALLBACKS_DEAD_QUEUE, CALLBACKS_QUEUE, declare_core
from services.api.operator.commands import replay_dead_callbacks
from tests.integration.helpers import make_app


def dead_delivery(engine: Engine, delivery_id: str) -> CallbackMessage:
    """A delivery row parked DEAD, and the message the notifier parked for it."""
    with engine.begin() as conn:
        app_pk = conn.execute(sa.text("SELECT MIN(id) FROM apps")).scalar_one()
        job_id = conn.execute(
            jobs.insert().values(
                app_pk=app_pk,
                job_name="j",
                handler="demo.noop",
                params="{}",
                status="SUCCEEDED",
                version=0,
                created_at=0,
                updated_at=0,
            )
        ).lastrowid
        MySqlDeliveryStore(conn).insert_deliveries(
            [NewDelivery(delivery_id, f"e-{delivery_id}", job_id, app_pk, "http://x/", "{}")],
            0,
        )
        conn.execute(
            callback_deliveries.update()
            .where(callback_deliveries.c.delivery_id == delivery_id)
            .values(status=DeliveryStatus.DEAD, attempts=3)
        )
    return CallbackMessage(delivery_id=delivery_id, app_pk=app_pk, url="http://x/", payload="{}")


def park(connection: BlockingConnection, bodies: list[bytes]) -> None:
    channel = connection.channel()
    declare_core(channel)
    for body in bodies:
        channel.basic_publish("", CALLBACKS_DEAD_QUEUE, body)
    channel.close()


def drain(connection: BlockingConnection, queue: str) -> list[bytes]:
    channel = connection.channel()
    bodies: list[bytes] = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            channel.close()
            return bodies
        bodies.append(body)


def status_of(engine: Engine, delivery_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                sa.select(callback_deliveries.c.status).where(
                    callback_deliveries.c.delivery_id == delivery_id
                )
            ).scalar_one()
        )


def test_a_message_no_notifier_can_read_stays_parked_and_the_rest_is_replayed(
    namespace: StoreSettings, engine: Engine, connection: BlockingConnection
) -> None:
    make_app(engine)
    good = dead_delivery(engine, "d-good")
    park(connection, [b"not a callback", good.model_dump_json().encode()])

    report = replay_dead_callbacks(namespace, 10, actor="tester")

    assert (report.replayed, report.unreadable) == (1, 1)
    assert drain(connection, CALLBACKS_DEAD_QUEUE) == [b"not a callback"]
    [replayed] = drain(connection, CALLBACKS_QUEUE)
    assert CallbackMessage.model_validate_json(replayed).delivery_id == "d-good"
    assert status_of(engine, "d-good") == DeliveryStatus.QUEUED


def test_one_delivery_is_replayed_alone_and_the_others_keep_their_places(
    namespace: StoreSettings, engine: Engine, connection: BlockingConnection
) -> None:
    from common.db.engine import make_engine
    from services.api.operator.dead_letters import replay_dead

    make_app(engine)
    parked = [dead_delivery(engine, name) for name in ("d-a", "d-b", "d-c")]
    park(connection, [m.model_dump_json().encode() for m in parked])
    own = make_engine(namespace, pool_size=1)
    try:
        report = replay_dead(connection, own, 5, limit=1, delivery_id="d-b", actor="tester")
        missing = replay_dead(connection, own, 5, limit=1, delivery_id="d-nope", actor="tester")
    finally:
        own.dispose()

    assert report.replayed_ids == ["d-b"] and missing.replayed == 0
    left = [
        CallbackMessage.model_validate_json(b).delivery_id
        for b in drain(connection, CALLBACKS_DEAD_QUEUE)
    ]
    assert left == ["d-a", "d-c"]
    assert [
        CallbackMessage.model_validate_json(b).attempt for b in drain(connection, CALLBACKS_QUEUE)
    ] == [1]
    assert [status_of(engine, d) for d in ("d-a", "d-b", "d-c")] == ["DEAD", "QUEUED", "DEAD"]
