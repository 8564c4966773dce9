"""The leader's gauges: the depth of the namespace's own queues, and live workers per
handler (0 for a handler only dead workers ran; forgotten workers' handlers dropped)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage
from common.clock import ClusterClock
from common.db.apps import MySqlAppTransactions
from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.jobs import NewJob, insert_job
from common.db.workers import MySqlWorkerTransactions
from common.metrics import HANDLER_LIVE_WORKERS, QUEUE_DEPTH, AppLabels, clear_worker_gauges
from common.states import WorkerState
from common.topology import RESULTS_DEAD_QUEUE, declare_core, declare_worker_queue
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.upkeep.gauges import LeaderGauges
from tests.integration.helpers import make_app, register_worker


@pytest.fixture(autouse=True)
def no_gauges_left() -> Iterator[None]:
    clear_worker_gauges()
    yield
    clear_worker_gauges()


def live_workers(handler: str) -> float | None:
    return REGISTRY.get_sample_value("kairos_handler_live_workers", {"handler": handler})


def test_queue_depths_and_live_workers_per_handler(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    clock = ClusterClock(redis_client)
    now = clock.now_ms()
    register_worker(engine, "w1", now_ms=now, handlers=("report.daily", "demo.noop"))
    register_worker(engine, "w2", now_ms=now - 600_000, handlers=("report.weekly",))
    register_worker(
        engine, "w3", now_ms=now - 600_000, handlers=("old.x",), state=WorkerState.FORGOTTEN
    )
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, "w1")
    channel.basic_consume("kairos.worker.w1", lambda *_: None)  # w1 is live
    BatchPublisher(channel).publish(
        [OutgoingMessage("", RESULTS_DEAD_QUEUE, b"{}", f"m{n}") for n in range(2)]
    )
    directory = WorkerDirectory(MySqlWorkerTransactions(engine), connection, clock, 15_000)

    app = make_app(engine, "flood")
    with engine.begin() as conn:
        job = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        runs = [NewExecution(f"e{n}", job, 1, n, 0) for n in range(3)]
        insert_executions(conn, runs, 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, ["e0"]), "w1"), 10)

    # Labels of its own: the process's give the first 20 apps it saw their ids and every
    # later one "other", and the tests before this one have recorded runs of many apps.
    gauges = LeaderGauges(
        MySqlAppTransactions(engine),
        MySqlWorkerTransactions(engine),
        directory,
        clock,
        every=0.0,
        labels=AppLabels(),
    )
    gauges.refresh()

    standing = {
        name: REGISTRY.get_sample_value(name, {"app": app.app_id})
        for name in ("kairos_app_runs_waiting", "kairos_app_runs_going")
    }
    assert standing == {"kairos_app_runs_waiting": 2, "kairos_app_runs_going": 1}
    assert live_workers("report.daily") == 1 and live_workers("demo.noop") == 1
    assert live_workers("report.weekly") == 0, "only a dead worker runs it"
    assert live_workers("old.x") is None, "a forgotten worker's handlers are dropped"
    depth = {s.labels["queue"]: s.value for f in QUEUE_DEPTH.collect() for s in f.samples}
    assert depth == {
        "kairos.results": 0,
        "kairos.results.dead": 2,
        "kairos.callbacks": 0,
        "kairos.callbacks.packs": 0,
        "kairos.callbacks.dead": 0,
    }

    register_worker(
        engine, "w2", now_ms=now - 600_000, handlers=("report.weekly",), state=WorkerState.FORGOTTEN
    )
    gauges.refresh()
    assert live_workers("report.weekly") is None
    labels = {s.labels["handler"] for f in HANDLER_LIVE_WORKERS.collect() for s in f.samples}
    assert labels == {"report.daily", "demo.noop"}
