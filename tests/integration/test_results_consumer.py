"""The results consumer on real stores: every result it acks is recorded."""

from __future__ import annotations

import threading
import time

import redis
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import DispatcherSettings, StoreSettings
from common.keys import RedisKeys
from common.slots import RESULTS_LAG_MS
from common.started_marks import RedisStartedMarks
from services.dispatcher.outcomes.results_thread import ResultsConsumer
from services.dispatcher.outcomes.started_keys import StartedKeys
from tests.books import Expectation, assert_books
from tests.integration.results_helpers import publish_results, queued_jobs


def test_a_backlog_of_results_with_callbacks_is_recorded_whole(
    namespace: StoreSettings, engine: Engine, results_consumer: None
) -> None:
    # A backlog larger than one gathered batch: results keep arriving while the
    # consumer publishes the callbacks of the batch before.
    job_ids = queued_jobs(engine, 400)
    publish_results(namespace, job_ids)
    expected = Expectation(job_ids, execution_statuses={"SUCCEEDED"}, callbacks="recorded")
    assert_books(engine, expected, timeout=30)


def test_no_execution_stays_queued_after_its_result_was_acked(
    namespace: StoreSettings, engine: Engine, results_consumer: None
) -> None:
    job_ids = queued_jobs(engine, 120)
    for start in range(0, len(job_ids), 10):
        publish_results(namespace, job_ids[start : start + 10])
    expected = Expectation(job_ids, execution_statuses={"SUCCEEDED"}, callbacks="recorded")
    books = assert_books(engine, expected, timeout=30)
    assert books.deliveries == 60


def test_recorded_executions_started_keys_are_given_a_short_life(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> None:
    job_ids = queued_jobs(engine, 30)
    keys = RedisKeys(namespace.namespace)
    week = namespace.idempotency_ttl_seconds
    for job_id in job_ids:
        redis_client.set(keys.execution_started(f"e-{job_id}"), "w1\n{}", ex=week)
    settings = DispatcherSettings(namespace=namespace.namespace)
    started = StartedKeys(RedisStartedMarks(redis_client, keys), 600)
    consumer = ResultsConsumer(settings, engine, ClusterClock(redis_client), "d1", started)
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        publish_results(namespace, job_ids)
        expected = Expectation(job_ids, execution_statuses={"SUCCEEDED"}, callbacks="recorded")
        assert_books(engine, expected, timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ttls = [redis_client.ttl(keys.execution_started(f"e-{j}")) for j in job_ids]
            if all(0 < t <= 600 for t in ttls):
                break
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert all(0 < t <= 600 for t in ttls), ttls


def test_the_consumer_measures_how_long_results_took_to_be_recorded(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> None:
    # The leader bounds worker queues by an in-flight count that holds runs until their
    # results are recorded; this lag says how many of those have in fact finished.
    job_ids = queued_jobs(engine, 20)
    settings = DispatcherSettings(namespace=namespace.namespace)
    consumer = ResultsConsumer(settings, engine, ClusterClock(redis_client), "d1")
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        publish_results(namespace, job_ids)  # ended long ago: the lag is held to the cap
        expected = Expectation(job_ids, execution_statuses={"SUCCEEDED"}, callbacks="recorded")
        assert_books(engine, expected, timeout=30)
        deadline = time.monotonic() + 10  # measured just after the batch's commit
        while consumer.lag.ms() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert 0 < consumer.lag.ms() <= RESULTS_LAG_MS
    finally:
        stop.set()
        thread.join(timeout=10)
