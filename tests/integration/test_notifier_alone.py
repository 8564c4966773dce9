"""A callback alone on its job, as the results consumer first publishes it, is posted
without a read of its delivery's row; a copy of it (the broker's redelivery, a parked or
handed-back message, a retry) is read first, so one already delivered is not posted
again and a job's order still holds."""

from __future__ import annotations

import dataclasses
import time

import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.config import NotifierSettings, StoreSettings
from common.db.apps import AppCredentials
from common.db.deliveries import NewDelivery
from common.messages import CallbackMessage
from common.states import DeliveryStatus
from common.topology import CALLBACKS_QUEUE, declare_core
from services.dispatcher.outcomes.callbacks import callback_message
from services.notifier.delivery import CallbackDeliverer
from services.notifier.pending import CallbackPacking, read_pending
from services.notifier.shares import ShareKeys
from tests.integration.notifier_helpers import (
    TIERS,
    app,
    deliverer,
    receiver,
    record,
    row,
    serving,
    wait_for_status,
)
from tests.integration.receivers import ScriptedReceiver
from tests.integration.test_notifier_job_order import set_status

__all__ = ["app", "deliverer", "receiver"]  # fixtures

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def alone(engine: Engine, url: str) -> NewDelivery:
    """A recorded delivery to ``url`` as the results consumer makes one that is alone."""
    return dataclasses.replace(record(engine, url), alone=True, traceparent=TRACEPARENT)


def body_of(delivery: NewDelivery) -> bytes:
    return callback_message(delivery).body


def test_a_callback_alone_on_its_job_is_posted_without_a_read_of_its_row(
    engine: Engine,
    app: AppCredentials,
    deliverer: CallbackDeliverer,
    receiver: ScriptedReceiver,
    statements: list[str],
) -> None:
    delivery = alone(engine, receiver.url)
    statements.clear()
    attempt = deliverer.deliver(body_of(delivery))
    assert attempt is not None and attempt.delivered
    assert row(engine, delivery.delivery_id).status == "DELIVERED"
    reads = [s for s in statements if "held" in s]
    assert reads == [], "its row was read before its attempt"
    [arrival] = receiver.arrivals
    assert arrival.headers["webhook-id"] == delivery.delivery_id


def test_a_copy_of_an_alone_callback_is_read_and_not_posted_again_once_delivered(
    engine: Engine,
    app: AppCredentials,
    deliverer: CallbackDeliverer,
    receiver: ScriptedReceiver,
) -> None:
    delivery = alone(engine, receiver.url)
    body = body_of(delivery)
    deliverer.deliver(body)
    deliverer.note_copies([read_pending(body, ShareKeys())])
    assert deliverer.deliver(body) is None
    assert len(receiver.arrivals) == 1
    assert row(engine, delivery.delivery_id).attempts == 1


def test_a_redelivered_alone_callback_already_delivered_is_not_posted_again(
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    app: AppCredentials,
    receiver: ScriptedReceiver,
) -> None:
    """A notifier recorded it DELIVERED and stopped before its ack: the broker hands the
    message out again, marked redelivered, and the next notifier reads the row."""
    delivered, fresh = alone(engine, receiver.url), alone(engine, receiver.url)
    set_status(engine, delivered, DeliveryStatus.DELIVERED)
    declare_core(connection.channel())
    assert not BatchPublisher(connection.channel()).publish([callback_message(delivered)])
    taken = connection.channel()
    method, _, _ = taken.basic_get(CALLBACKS_QUEUE, auto_ack=False)
    assert method is not None and not method.redelivered
    taken.close()  # unacked: back to the queue, marked redelivered
    assert not BatchPublisher(connection.channel()).publish([callback_message(fresh)])
    settings = NotifierSettings(namespace=namespace.namespace, retry_tiers_seconds=TIERS)
    notifier = serving(settings, engine, redis_client)
    next(notifier)
    try:
        wait_for_status(engine, fresh.delivery_id, "DELIVERED", 30)
        time.sleep(0.5)  # the copy came first; let its settling end
    finally:
        next(notifier, None)
    left = connection.channel().queue_declare(CALLBACKS_QUEUE, passive=True)
    assert left.method.message_count == 0, "the copy was handed back, not settled"
    assert [a.headers["webhook-id"] for a in receiver.arrivals] == [fresh.delivery_id]
    assert row(engine, delivered.delivery_id).attempts == 0


def test_an_alone_callback_sent_on_again_is_read_before_its_next_attempt(
    engine: Engine, app: AppCredentials, deliverer: CallbackDeliverer, receiver: ScriptedReceiver
) -> None:
    """Parked, handed back by a stopping notifier, or retried: its job's callbacks may
    have moved on meanwhile, and the notifier that takes it cannot tell a copy."""
    body = body_of(alone(engine, receiver.url))
    parked = dataclasses.replace(read_pending(body, ShareKeys()), park=True)
    follow_up = deliverer.settle_unsent(parked).follow_up
    assert follow_up is not None
    handed_back = CallbackPacking(ShareKeys()).repack([read_pending(body, ShareKeys())])
    for again in (follow_up.body, handed_back):
        message = CallbackMessage.model_validate_json(again)
        assert (message.alone, message.traceparent) == (False, TRACEPARENT)
