"""No callback is lost to a crash: one recorded but never published (the results
consumer stopped between its commit and its publish) is published again after its
delay, and callbacks in flight when the notifier's connection drops are posted again
under their own webhook-id."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import httpx
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import NotifierSettings, StoreSettings
from common.db.apps import AppCredentials
from common.runtime import keep_serving
from common.topology import declare_core
from services.dispatcher.outcomes.callbacks import republish_stale_deliveries
from services.notifier.main import _serve, notifier_parts
from services.notifier.posting import CallbackPoster
from tests.integration.notifier_helpers import app, notifier, record, row, send, wait_for_status
from tests.integration.receivers import LOCAL_RECEIVERS, ScriptedReceiver

__all__ = ["app", "notifier"]  # fixtures

MANAGEMENT = "http://127.0.0.1:15672"
AUTH = ("guest", "guest")


def test_a_pending_callback_is_published_again_after_its_delay(
    engine: Engine,
    connection: BlockingConnection,
    redis_client: redis.Redis,
    notifier: None,
    app: AppCredentials,
) -> None:
    receiver = ScriptedReceiver()
    clock = ClusterClock(redis_client)
    try:
        delivery = record(engine, receiver.url)
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE callback_deliveries SET updated_at = %s", (clock.now_ms(),)
            )
        declare_core(connection.channel())
        publisher = BatchPublisher(connection.channel())
        republish_stale_deliveries(engine, publisher, clock, 2_000)
        assert row(engine, delivery.delivery_id).status == "PENDING", "not before its delay"
        time.sleep(2.1)
        republish_stale_deliveries(engine, publisher, clock, 2_000)
        wait_for_status(engine, delivery.delivery_id, "DELIVERED", 30)
    finally:
        receiver.close()
    assert [a.headers["webhook-id"] for a in receiver.arrivals] == [delivery.delivery_id]


def close_notifier_connections(namespace: str) -> int:
    listed = [
        c
        for c in httpx.get(f"{MANAGEMENT}/api/connections", auth=AUTH, timeout=10).json()
        if c.get("vhost") == namespace
        and (c.get("client_properties") or {}).get("connection_name") == "kairos notifier"
    ]
    for c in listed:
        name = c["name"].replace("/", "%2F")
        httpx.delete(f"{MANAGEMENT}/api/connections/{name}", auth=AUTH, timeout=10)
    return len(listed)


def test_callbacks_in_flight_when_the_notifier_reconnects_arrive_under_their_own_id(
    namespace: StoreSettings,
    engine: Engine,
    connection: BlockingConnection,
    redis_client: redis.Redis,
    app: AppCredentials,
) -> None:
    settings = NotifierSettings(namespace=namespace.namespace, retry_tiers_seconds="1")
    poster = CallbackPoster(10, policy=LOCAL_RECEIVERS)
    poster.start()
    parts = notifier_parts(settings, engine, poster, ClusterClock(redis_client))
    stop = threading.Event()
    serving = threading.Thread(
        target=keep_serving,
        args=("notifier", lambda: _serve(settings, parts, stop), stop),
        daemon=True,
    )
    serving.start()
    receiver = ScriptedReceiver(delay_seconds=1.0)
    try:
        sent = [send(engine, connection, receiver.url) for _ in range(6)]
        deadline = time.monotonic() + 10
        while not receiver.arrivals and time.monotonic() < deadline:
            time.sleep(0.05)
        closed = 0
        while not closed and time.monotonic() < deadline + 10:
            closed = close_notifier_connections(namespace.namespace)
        assert closed, "the notifier's connection was there to close"
        for delivery_id in sent:
            wait_for_status(engine, delivery_id, "DELIVERED", 60)
    finally:
        stop.set()
        serving.join(timeout=30)
        poster.close()
        receiver.close()
    bodies: dict[str, set[str]] = defaultdict(set)
    for arrival in receiver.arrivals:
        bodies[arrival.headers["webhook-id"]].add(arrival.body)
    assert set(bodies) == set(sent), "every callback arrived, under its own id"
    assert all(len(b) == 1 for b in bodies.values()), "a duplicate is the same callback"
