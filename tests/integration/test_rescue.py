"""The leader's dead-worker sweep on real MySQL, Redis and RabbitMQ."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, connect
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.jobs import NewJob, insert_job
from common.keys import RedisKeys
from common.loadbalance import WorkerChooser
from common.messages import ExecutionResult, ResultBatch
from common.topology import RESULTS_QUEUE, declare_core, declare_worker_queue
from services.dispatcher.directory import WorkerDirectory
from services.dispatcher.recovery import Recovery
from tests.integration.helpers import make_app, register_worker


@pytest.fixture
def connection(namespace: StoreSettings) -> Iterator[BlockingConnection]:
    opened = connect(namespace, "test")
    yield opened
    opened.close()


def queued_on(engine: Engine, execution_id: str, worker_id: str) -> int:
    with engine.begin() as conn:
        job_id = insert_job(
            conn, NewJob(1, execution_id, "demo.noop", {}, None, 0, None, None, None), 0
        )
        insert_executions(conn, [NewExecution(execution_id, job_id, 1, 0, 0)], 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, [execution_id]), worker_id), 10)
    return job_id


def published_results(connection: BlockingConnection) -> list[ExecutionResult]:
    channel = connection.channel()
    found: list[ExecutionResult] = []
    while True:
        method, _props, body = channel.basic_get(RESULTS_QUEUE, auto_ack=True)
        if method is None:
            return found
        found.extend(ResultBatch.model_validate_json(body).results)


def test_a_dead_workers_runs_are_lost_reported_or_moved_by_their_started_keys(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    make_app(engine)
    clock = ClusterClock(redis_client)
    keys = RedisKeys(namespace.namespace)
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, "dead")  # no consumer: the worker is gone
    register_worker(engine, "dead", now_ms=0)
    running = queued_on(engine, "e-running", "dead")
    ended = queued_on(engine, "e-ended", "dead")
    queued_on(engine, "e-waiting", "dead")
    stored = ExecutionResult(
        execution_id="e-ended",
        job_id=ended,
        worker_id="dead",
        status="SUCCEEDED",
        started_at=20,
        ended_at=30,
    )
    redis_client.set(keys.execution_started("e-running"), "dead")
    redis_client.set(keys.execution_started("e-ended"), "dead\n" + stored.model_dump_json())
    directory = WorkerDirectory(engine, connection, clock, 60_000)
    recovery = Recovery(
        engine,
        BatchPublisher(connection.channel()),
        directory,
        WorkerChooser(),
        (redis_client, keys, clock),
        5_000,
        1_000,
        30_000,
    )
    recovery.rescue_dead_workers()
    by_execution = {r.execution_id: r for r in published_results(connection)}
    assert by_execution["e-ended"] == stored
    assert by_execution["e-running"].status == "LOST"
    assert by_execution["e-running"].job_id == running
    assert "e-waiting" not in by_execution
