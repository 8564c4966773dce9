"""The results consumer on real stores: every result it acks is recorded."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.clock import ClusterClock
from common.config import DispatcherSettings, StoreSettings
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_jobs
from common.messages import ExecutionResult, ResultBatch
from common.topology import RESULTS_EXCHANGE, RESULTS_QUEUE, declare_core
from services.dispatcher.outcomes.results_thread import ResultsConsumer
from tests.books import Expectation, assert_books
from tests.integration.helpers import make_app

CALLBACK_URL = "http://127.0.0.1:9/hook"


def queued_jobs(engine: Engine, count: int) -> list[int]:
    """``count`` one-shot jobs, every other one with a callback, each with a QUEUED run."""
    make_app(engine)
    callback = [None, CALLBACK_URL]
    new = [
        NewJob(1, f"j{n}", "demo.noop", {}, None, 1_000, callback[n % 2], None, None)
        for n in range(count)
    ]
    with engine.begin() as conn:
        job_ids = insert_jobs(conn, new, 0)
        runs = [NewExecution(f"e-{j}", j, 1, 1_000, 1_000).queued_on("w1") for j in job_ids]
        insert_executions(conn, runs, 1_000)
        # As a claim leaves a one-shot job: RUNNING, its trigger handed out.
        conn.execute(sa.text("UPDATE jobs SET status = 'RUNNING', next_trigger_time = NULL"))
    return job_ids


def publish_results(settings: StoreSettings, job_ids: list[int]) -> None:
    """One results message per job, as workers send them."""
    connection = connect(settings, "test results")
    try:
        channel = connection.channel()
        declare_core(channel)
        messages = [
            OutgoingMessage(RESULTS_EXCHANGE, RESULTS_QUEUE, _result_body(j), f"r-{j}")
            for j in job_ids
        ]
        BatchPublisher(connection.channel()).publish(messages)
    finally:
        connection.close()


def _result_body(job_id: int) -> bytes:
    result = ExecutionResult(
        execution_id=f"e-{job_id}",
        job_id=job_id,
        worker_id="w1",
        status="SUCCEEDED",
        started_at=1_100,
        ended_at=1_200,
    )
    return ResultBatch(worker_id="w1", results=[result]).model_dump_json().encode()


@pytest.fixture
def consumer(namespace: StoreSettings, engine: Engine, redis_client: redis.Redis) -> Iterator[None]:
    settings = DispatcherSettings(namespace=namespace.namespace)
    consumer = ResultsConsumer(settings, engine, ClusterClock(redis_client), "d1")
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


def test_a_backlog_of_results_with_callbacks_is_recorded_whole(
    namespace: StoreSettings, engine: Engine, consumer: None
) -> None:
    # A backlog larger than one gathered batch: results keep arriving while the
    # consumer publishes the callbacks of the batch before.
    job_ids = queued_jobs(engine, 400)
    publish_results(namespace, job_ids)
    assert_books(engine, Expectation(job_ids, callbacks="recorded"), timeout=30)


def test_no_execution_stays_queued_after_its_result_was_acked(
    namespace: StoreSettings, engine: Engine, consumer: None
) -> None:
    job_ids = queued_jobs(engine, 120)
    for start in range(0, len(job_ids), 10):
        publish_results(namespace, job_ids[start : start + 10])
    books = assert_books(engine, Expectation(job_ids, callbacks="recorded"), timeout=30)
    assert books.deliveries == 60
