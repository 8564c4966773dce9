"""A run's callback is recorded QUEUED and published after the commit: when a results
consumer stops between the two, the broker hands its results out again marked
redelivered, and the consumer that takes them hands the callbacks not yet attempted to
the sweep (PENDING again), which publishes them after its delay. A result that merely
comes twice publishes nothing twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import DispatcherSettings, StoreSettings
from common.messages import PACK_PREFIX, CallbackMessage, CallbackPack, ResultBatch
from common.topology import CALLBACK_PACKS_QUEUE, CALLBACKS_QUEUE, RESULTS_QUEUE, declare_core
from services.dispatcher.outcomes.callbacks import republish_stale_deliveries
from services.dispatcher.outcomes.recording import record_results
from services.dispatcher.outcomes.results_thread import ResultsConsumer
from tests.integration.results_helpers import publish_results, queued_jobs, succeeded


@pytest.fixture
def start_consumer(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> Iterator[threading.Event]:
    """Call ``set()`` on it to start a results consumer, stopped after the test."""
    go, stop = threading.Event(), threading.Event()
    settings = DispatcherSettings(namespace=namespace.namespace)
    consumer = ResultsConsumer(settings, engine, ClusterClock(redis_client), "d1")

    def run() -> None:
        go.wait()
        if not stop.is_set():
            consumer.run(stop)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield go
    stop.set()
    go.set()
    thread.join(timeout=10)


def callback_messages(connection: BlockingConnection) -> list[CallbackMessage]:
    """Every callback in the callbacks queues (single, and in packs), taken off them."""
    channel = connection.channel()
    found: list[CallbackMessage] = []
    for queue in (CALLBACKS_QUEUE, CALLBACK_PACKS_QUEUE):
        while True:
            method, _, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                break
            if body.startswith(PACK_PREFIX):
                found += CallbackPack.model_validate_json(body).callbacks
            else:
                found.append(CallbackMessage.model_validate_json(body))
    return found


def wait_until_taken(connection: BlockingConnection, queue: str, seconds: float = 30) -> None:
    """Until every message of ``queue`` is taken and acked."""
    deadline = time.monotonic() + seconds
    channel = connection.channel()
    while channel.queue_declare(queue, passive=True).method.message_count:
        assert time.monotonic() < deadline, f"{queue} was not emptied"
        time.sleep(0.1)
    time.sleep(0.5)  # the last batch's publish and ack


def statuses(engine: Engine) -> dict[str, tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT execution_id, status, attempts FROM callback_deliveries")
        ).all()
    return {str(r[0]): (str(r[1]), int(r[2])) for r in rows}


def test_callbacks_recorded_before_a_redelivery_go_to_the_sweep_unless_attempted(
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    start_consumer: threading.Event,
) -> None:
    jobs = queued_jobs(engine, 6)  # every other one calls back: jobs 1, 3 and 5
    # A consumer recorded them, then stopped before its publish and its ack.
    results = [ResultBatch.model_validate_json(succeeded(j)).results[0] for j in jobs]
    created = record_results(engine, ClusterClock(redis_client), results)
    assert {d.execution_id for d in created} == {f"e-{jobs[n]}" for n in (1, 3, 5)}
    assert {s for s, _ in statuses(engine).values()} == {"QUEUED"}
    # One was published after all and a notifier has attempted it.
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE callback_deliveries SET attempts = 1 WHERE execution_id = :e"),
            {"e": f"e-{jobs[5]}"},
        )
    publish_results(namespace, jobs)
    declare_core(connection.channel())
    taken = connection.channel()
    for _ in jobs:
        method, _, _ = taken.basic_get(RESULTS_QUEUE, auto_ack=False)
        assert method is not None
    taken.close()  # unacked: back to the queue, marked redelivered
    start_consumer.set()
    wait_until_taken(connection, RESULTS_QUEUE)
    assert callback_messages(connection) == [], "not at once: the sweep, after its delay"
    assert statuses(engine) == {
        f"e-{jobs[1]}": ("PENDING", 0),
        f"e-{jobs[3]}": ("PENDING", 0),
        f"e-{jobs[5]}": ("QUEUED", 1),
    }
    clock = ClusterClock(redis_client)
    time.sleep(0.01)
    republish_stale_deliveries(engine, BatchPublisher(connection.channel()), clock, 0)
    again = callback_messages(connection)
    assert sorted(m.delivery_id for m in again) == sorted(
        d.delivery_id for d in created if d.execution_id != f"e-{jobs[5]}"
    )
    assert not any(m.alone for m in again), "a copy is read before its attempt"


def test_results_recorded_in_turn_publish_each_callback_once(
    namespace: StoreSettings,
    engine: Engine,
    connection: BlockingConnection,
    start_consumer: threading.Event,
) -> None:
    jobs = queued_jobs(engine, 40)
    start_consumer.set()
    publish_results(namespace, jobs)
    wait_until_taken(connection, RESULTS_QUEUE)
    # The same results again, as a worker that lost its connection sends them again:
    # recorded already, and not handed out by the broker before.
    publish_results(namespace, jobs)
    wait_until_taken(connection, RESULTS_QUEUE)
    sent = callback_messages(connection)
    assert len(sent) == 20 == len({m.delivery_id for m in sent})
    assert set(statuses(engine).values()) == {("QUEUED", 0)}
    assert all(m.alone for m in sent), "each job's only callback"
