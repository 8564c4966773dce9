"""Callbacks in packs (one app's, to one URL, in one message of the packs' queue) on a
real notifier: each delivered once, both queues left empty, a redelivered pack read
first, and a slow receiver's packs never holding up another receiver's callbacks."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.config import NotifierSettings, StoreSettings
from common.db.apps import AppCredentials
from common.db.deliveries import NewDelivery
from common.states import DeliveryStatus
from common.topology import CALLBACK_PACKS_QUEUE, CALLBACKS_QUEUE, declare_core
from services.dispatcher.outcomes.callbacks import callback_messages
from tests.integration.notifier_helpers import (
    TIERS,
    app,
    record,
    row,
    serving,
    verify_all,
    wait_for_status,
)
from tests.integration.receivers import ScriptedReceiver
from tests.integration.test_notifier_job_order import set_status

__all__ = ["app"]  # fixtures


@pytest.fixture
def receivers() -> Iterator[list[ScriptedReceiver]]:
    made: list[ScriptedReceiver] = []
    yield made
    for server in made:
        server.close()


def publish(connection: BlockingConnection, rows: list[NewDelivery]) -> None:
    declare_core(connection.channel())
    assert not BatchPublisher(connection.channel()).publish(callback_messages(rows))


def depth(connection: BlockingConnection, queue: str) -> int:
    return int(connection.channel().queue_declare(queue, passive=True).method.message_count)


def settings_of(
    namespace: StoreSettings, held: int = 1000, host_backlog: int = 400
) -> NotifierSettings:
    return NotifierSettings(
        namespace=namespace.namespace,
        retry_tiers_seconds=TIERS,
        held_callbacks=held,
        host_backlog=host_backlog,
        secret_cache_seconds=0,
    )


def test_packs_of_two_receivers_are_each_delivered_once_and_leave_no_message(
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    app: AppCredentials,
    receivers: list[ScriptedReceiver],
) -> None:
    one, two = ScriptedReceiver(), ScriptedReceiver()
    receivers += [one, two]
    rows = [record(engine, one.url) for _ in range(70)] + [record(engine, two.url)]
    publish(connection, rows)
    assert depth(connection, CALLBACK_PACKS_QUEUE) == 3  # 32 + 32 + 6
    assert depth(connection, CALLBACKS_QUEUE) == 1  # the one to ``two``, alone
    notifier = serving(settings_of(namespace), engine, redis_client)
    next(notifier)
    try:
        for delivery in rows:
            wait_for_status(engine, delivery.delivery_id, "DELIVERED", 30)
        time.sleep(0.3)  # the last records' acks
    finally:
        next(notifier, None)
    posted = [a.headers["webhook-id"] for r in receivers for a in r.arrivals]
    assert sorted(posted) == sorted(d.delivery_id for d in rows)
    assert verify_all(one, app.signing_secret) | verify_all(two, app.signing_secret) == set(posted)
    assert (depth(connection, CALLBACK_PACKS_QUEUE), depth(connection, CALLBACKS_QUEUE)) == (0, 0)


def test_a_redelivered_pack_posts_only_its_callbacks_not_delivered_before(
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    app: AppCredentials,
    receivers: list[ScriptedReceiver],
) -> None:
    """A notifier recorded part of a pack and stopped before its ack: the broker hands
    the pack out again, marked redelivered, and the next notifier reads each row."""
    receiver = ScriptedReceiver()
    receivers.append(receiver)
    rows = [record(engine, receiver.url) for _ in range(4)]
    for delivered in rows[:2]:
        set_status(engine, delivered, DeliveryStatus.DELIVERED)
    publish(connection, [r.__class__(**{**r.__dict__, "alone": True}) for r in rows])
    taken = connection.channel()
    method, _, _ = taken.basic_get(CALLBACK_PACKS_QUEUE, auto_ack=False)
    assert method is not None and not method.redelivered
    taken.close()  # unacked: back to the queue, marked redelivered
    notifier = serving(settings_of(namespace), engine, redis_client)
    next(notifier)
    try:
        for delivery in rows[2:]:
            wait_for_status(engine, delivery.delivery_id, "DELIVERED", 30)
        time.sleep(0.3)
    finally:
        next(notifier, None)
    assert sorted(a.headers["webhook-id"] for a in receiver.arrivals) == sorted(
        d.delivery_id for d in rows[2:]
    )
    assert [row(engine, d.delivery_id).attempts for d in rows[:2]] == [0, 0]
    assert depth(connection, CALLBACK_PACKS_QUEUE) == 0


def test_a_slow_receivers_packs_do_not_hold_up_another_receivers_callbacks(
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    app: AppCredentials,
    receivers: list[ScriptedReceiver],
) -> None:
    """The slow receiver's packs come first and fill what the notifier holds of the
    packs' queue (64 callbacks: two packs); the fast receiver's come behind them in the
    same queue. Once the slow host's backlog stalls past its bound (16), its newest are
    parked, its packs acked, and the fast receiver's reach the line and land while the
    slow one's are still being answered."""
    slow, fast = ScriptedReceiver(delay_seconds=1.0), ScriptedReceiver()
    receivers += [slow, fast]
    slow_rows = [record(engine, slow.url) for _ in range(96)]
    fast_rows = [record(engine, fast.url) for _ in range(40)]
    publish(connection, slow_rows)
    publish(connection, fast_rows)
    notifier = serving(
        settings_of(namespace, held=64, host_backlog=16), engine, redis_client, join_s=60
    )
    next(notifier)
    try:
        began = time.monotonic()
        for delivery in fast_rows:
            wait_for_status(engine, delivery.delivery_id, "DELIVERED", 60)
        took = time.monotonic() - began
    finally:
        next(notifier, None)
    # The slow receiver takes 1 s an answer with a few attempts at once: its 96 would
    # take well over 10 s in front of the fast ones.
    assert took < 10, f"the fast receiver's callbacks waited {took:.1f} s"
