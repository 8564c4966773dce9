"""Alerts on dead callbacks and dead workers, on real stores, delivered signed."""

from __future__ import annotations

import json

import pika
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine
from standardwebhooks import Webhook

from common.alerts.rules import RuleCache
from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.workers import MySqlWorkerTransactions
from common.loadbalance import WorkerChooser
from common.stores import Stores
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.outcomes.callbacks import republish_stale_deliveries
from services.dispatcher.routing.route import Router
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.upkeep.alerting import LeaderAlerts
from services.dispatcher.upkeep.rescue import Rescue, RescueSettings
from tests.integration.alert_helpers import alert_rows, new_rule
from tests.integration.helpers import make_app, register_worker
from tests.integration.notifier_helpers import notifier, send, wait_for_status  # noqa: F401
from tests.integration.receivers import Answer, ScriptedReceiver


def test_a_callback_going_dead_fires_an_alert_delivered_signed(
    engine: Engine,
    redis_client: redis.Redis,
    connection: pika.BlockingConnection,
    notifier: None,  # noqa: F811
) -> None:
    failing = ScriptedReceiver([Answer(500)] * 10)
    told = ScriptedReceiver()
    try:
        app = make_app(engine)
        _rule, secret = new_rule(engine, told.url, "DEAD_CALLBACK", app_id=app.app_id)
        delivery_id = send(engine, connection, failing.url)
        wait_for_status(engine, delivery_id, "DEAD", 30)
        (alert,) = alert_rows(engine)
        body = json.loads(str(alert.payload))
        assert body["type"] == "alert.dead_callback"
        assert body["data"]["deliveryId"] == delivery_id
        assert body["data"]["app"] == app.app_id
        assert alert.status == "PENDING"
        # The leader's sweep hands it to the notifier, which delivers it as a callback.
        clock = ClusterClock(redis_client)
        publisher = BatchPublisher(connection.channel())
        republish_stale_deliveries(engine, publisher, clock, after_ms=0)
        wait_for_status(engine, str(alert.delivery_id), "DELIVERED", 30)
        (arrival,) = told.arrivals
        verified = Webhook(secret).verify(arrival.body, arrival.headers)
        assert verified["type"] == "alert.dead_callback"
        assert "is DEAD" in verified["data"]["text"]
    finally:
        failing.close()
        told.close()


def rescue_with_alerts(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> Rescue:
    """A leader's rescue as the sweep builds it, telling its alerts of dead workers."""
    stores = Stores.build(namespace, engine, redis_client)
    publisher = BatchPublisher(connection.channel())
    alerts = LeaderAlerts(engine, publisher, stores.clock, RuleCache(engine, 0))
    directory = WorkerDirectory(MySqlWorkerTransactions(engine), connection, stores.clock, 60_000)
    return Rescue.on_stores(
        stores,
        publisher,
        Router(directory, WorkerChooser()),
        RescueSettings(stale_ms=1_000),
        alerts.worker_dead,
    )


def test_a_dead_worker_is_told_once_however_many_sweeps_and_leaders_see_it(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    make_app(engine)
    rule, _ = new_rule(engine, "http://127.0.0.1:9/hook", "WORKER_GONE")
    on_app, _ = new_rule(engine, "http://127.0.0.1:9/hook", "FAILED")
    channel = connection.channel()
    declare_core(channel)
    for worker_id in ("gone-1", "gone-2"):
        declare_worker_queue(channel, worker_id)  # no consumer: the worker is gone
        register_worker(engine, worker_id, now_ms=5)
    leader = rescue_with_alerts(engine, redis_client, connection, namespace)
    for _ in range(3):
        leader.rescue_dead_workers()
    # A new leader reads what was told from MySQL.
    rescue_with_alerts(engine, redis_client, connection, namespace).rescue_dead_workers()
    rows = alert_rows(engine)
    assert len(rows) == 2
    assert {r.alert_rule_pk for r in rows} == {rule.rule_pk}
    bodies = [json.loads(str(r.payload)) for r in rows]
    assert {b["data"]["workerId"] for b in bodies} == {"gone-1", "gone-2"}
    assert {b["type"] for b in bodies} == {"alert.worker_gone"}
    assert on_app.rule_pk not in {r.alert_rule_pk for r in rows}
    # Published at once, QUEUED in the notifier's queue.
    assert {r.status for r in rows} == {"QUEUED"}
