"""The worker store on its hot paths costs what the SQL it replaced did: one statement
per heartbeat (an upsert), two per reload of the dispatcher's worker directory (the
fresh workers, and what is QUEUED on each)."""

from __future__ import annotations

import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.workers import MySqlWorkerTransactions
from common.stores import Stores
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.routing.workers import WorkerDirectory
from services.worker.heartbeat import Heartbeater, WorkerIdentity
from tests.integration.test_worker_drain import Idle


def test_a_heartbeat_writes_one_upsert_and_a_reload_reads_twice(
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    statements: list[str],
) -> None:
    stores = Stores.build(namespace, engine, redis_client)
    beat = Heartbeater(WorkerIdentity("w1", 2, ("demo.noop",)), Idle(), stores, 60)
    statements.clear()
    beat.send()
    assert len(statements) == 1
    assert statements[0].startswith("INSERT INTO workers")
    assert "ON DUPLICATE KEY UPDATE" in statements[0]

    channel = connection.channel()
    declare_core(channel)
    channel.basic_consume(declare_worker_queue(channel, "w1"), lambda *_: None)
    workers = MySqlWorkerTransactions(engine)
    directory = WorkerDirectory(workers, connection, ClusterClock(redis_client), 60_000, ttl=0.0)
    statements.clear()
    assert [w.worker_id for w in directory.live()] == ["w1"]
    assert len(statements) == 2
    assert statements[0].startswith("SELECT workers.")
    assert "count(*)" in statements[1].lower() and "GROUP BY executions.worker_id" in statements[1]


def test_a_queue_counted_afresh_reloads_the_view_at_the_next_look(
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    statements: list[str],
) -> None:
    # The view read before a recall still shows the room the old prices left: kept for
    # its time to live, it would let the firer send the recalled runs straight back.
    stores = Stores.build(namespace, engine, redis_client)
    Heartbeater(WorkerIdentity("w1", 2, ("demo.noop",)), Idle(), stores, 60).send()
    channel = connection.channel()
    declare_core(channel)
    channel.basic_consume(declare_worker_queue(channel, "w1"), lambda *_: None)
    workers = MySqlWorkerTransactions(engine)
    directory = WorkerDirectory(workers, connection, ClusterClock(redis_client), 60_000, ttl=60.0)
    first = directory.live()
    statements.clear()
    assert directory.live() is first, "kept for its time to live"
    assert statements == []
    directory.repriced("w1", 0, 0.0, 3)
    assert directory.live() is not first
    assert len(statements) == 2, "read again at once"
