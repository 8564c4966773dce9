"""The reconciler on real MySQL, Redis and RabbitMQ: long-QUEUED executions on live workers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.executions_with_job import SLOT_WAIT
from common.db.workers import MySqlWorkerTransactions
from common.keys import WORKER_HELD, WORKER_HELD_AT, RedisKeys
from common.messages import ExecutionResult
from common.started_marks import RECALLED, RECONCILER, parse_started
from common.states import ExecutionStatus
from common.stores import Stores
from common.topology import declare_core, declare_worker_queue, worker_queue
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.upkeep import reconcile as reconcile_module
from services.dispatcher.upkeep.reconcile import Reconciler, ReconcileSettings
from tests.integration.helpers import make_app, register_worker
from tests.integration.test_rescue import published_results, queued_on


@pytest.fixture
def live_worker(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> Iterator[str]:
    """Worker w1: a fresh heartbeat row and a consumer on its queue (that takes nothing)."""
    make_app(engine)
    register_worker(engine, "w1", now_ms=ClusterClock(redis_client).now_ms())
    consuming = connect(namespace, "test worker w1")
    channel = consuming.channel()
    declare_core(channel)
    declare_worker_queue(channel, "w1")
    channel.basic_qos(prefetch_count=1)
    channel.basic_consume(worker_queue("w1"), lambda *_: None)
    yield "w1"
    consuming.close()


class Stack:
    """A reconciler with its stores, and what a worker's heartbeat would write."""

    def __init__(
        self, engine: Engine, client: redis.Redis, connection: BlockingConnection, ns: str
    ) -> None:
        self.client = client
        self.keys = RedisKeys(ns)
        self.clock = ClusterClock(client)
        directory = WorkerDirectory(MySqlWorkerTransactions(engine), connection, self.clock, 60_000)
        self.reconciler = Reconciler(
            Stores(StoreSettings(namespace=ns), engine, client, self.keys, self.clock),
            BatchPublisher(connection.channel()),
            directory,
            ReconcileSettings(after_ms=1_000, fence_ttl_seconds=60),
        )

    def heartbeat(self, held: int, later_ms: int = 0) -> None:
        """A heartbeat counted ``later_ms`` after now, saying the worker held ``held``."""
        at = self.clock.now_ms() + later_ms
        self.client.hset(self.keys.worker("w1"), mapping={WORKER_HELD: held, WORKER_HELD_AT: at})

    def started(self, execution_id: str) -> str | None:
        return parse_started(self.client.get(self.keys.execution_started(execution_id)))[0]


@pytest.fixture
def stack(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
    live_worker: str,
) -> Stack:
    return Stack(engine, redis_client, connection, namespace.namespace)


def reconciled(cause: str) -> float:
    return REGISTRY.get_sample_value("kairos_executions_reconciled_total", {"cause": cause}) or 0


def test_a_stored_outcome_that_was_never_recorded_is_published_again(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    job_id = queued_on(engine, "e-ended", "w1")
    stored = ExecutionResult(
        execution_id="e-ended",
        job_id=job_id,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=20,
        ended_at=30,
    )
    stack.client.set(stack.keys.execution_started("e-ended"), "w1\n" + stored.model_dump_json())
    before = reconciled("unreported_result")
    stack.reconciler.sweep()
    assert published_results(connection) == [stored]
    assert reconciled("unreported_result") == before + 1


def test_a_run_still_going_is_left_alone(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    queued_on(engine, "e-running", "w1")
    stack.client.set(stack.keys.execution_started("e-running"), "w1")
    stack.heartbeat(held=0)
    for _ in range(2):
        stack.reconciler.sweep()
        stack.heartbeat(held=0, later_ms=5_000)
    assert published_results(connection) == []
    assert stack.started("e-running") == "w1"


def test_runs_still_going_do_not_keep_the_reconciler_from_the_rest(
    engine: Engine, connection: BlockingConnection, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More long runs than one sweep reads, queued before the execution that slipped: read
    # first at every sweep and left alone, they would hide it for good.
    monkeypatch.setattr(reconcile_module, "SWEEP_LIMIT", 2)
    for n in range(3):
        queued_on(engine, f"e-running-{n}", "w1")
        stack.client.set(stack.keys.execution_started(f"e-running-{n}"), "w1")
    job_id = queued_on(engine, "e-ended", "w1")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE executions SET dispatched_at = id"))
    stored = ExecutionResult(
        execution_id="e-ended",
        job_id=job_id,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=20,
        ended_at=30,
    )
    stack.client.set(stack.keys.execution_started("e-ended"), "w1\n" + stored.model_dump_json())
    for _ in range(2):
        stack.reconciler.sweep()
    assert published_results(connection) == [stored]


def test_a_never_started_execution_is_lost_once_a_later_heartbeat_says_nothing_is_held(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    queued_on(engine, "e-gone", "w1")
    stack.heartbeat(held=0)
    before = reconciled("never_started")
    stack.reconciler.sweep()
    assert published_results(connection) == [], "the first quiet sweep only takes note"
    assert stack.started("e-gone") is None
    stack.heartbeat(held=0, later_ms=5_000)
    stack.reconciler.sweep()
    (lost,) = published_results(connection)
    assert (lost.execution_id, lost.status) == ("e-gone", "LOST")
    assert lost.message is not None and "never started" in lost.message
    assert stack.started("e-gone") == RECONCILER, "a copy turning up later must not run"
    assert reconciled("never_started") == before + 1


def test_a_worker_holding_messages_keeps_its_never_started_executions(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    queued_on(engine, "e-waiting", "w1")
    stack.heartbeat(held=3)
    stack.reconciler.sweep()
    stack.heartbeat(held=3, later_ms=5_000)
    stack.reconciler.sweep()
    assert published_results(connection) == []
    assert stack.started("e-waiting") is None


def test_a_message_ready_in_the_workers_queue_keeps_its_executions(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    queued_on(engine, "e-behind", "w1")
    # The consumer takes one message (prefetch 1) and never acks: the second waits.
    publisher = BatchPublisher(connection.channel())
    for n in range(2):
        publisher.publish([OutgoingMessage("", worker_queue("w1"), b"{}", f"m{n}")])
    stack.heartbeat(held=0)
    stack.reconciler.sweep()
    stack.heartbeat(held=0, later_ms=5_000)
    stack.reconciler.sweep()
    assert published_results(connection) == []


def test_a_fenced_execution_whose_report_was_lost_is_reported_again(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    queued_on(engine, "e-fenced", "w1")
    stack.client.set(stack.keys.execution_started("e-fenced"), RECONCILER)
    stack.reconciler.sweep()
    (lost,) = published_results(connection)
    assert (lost.execution_id, lost.status) == ("e-fenced", "LOST")


def test_a_stored_outcome_that_cannot_be_read_ends_the_execution_failed(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    queued_on(engine, "e-garbled", "w1")
    stack.client.set(stack.keys.execution_started("e-garbled"), "w1\n{not json")
    stack.reconciler.sweep()
    (failed,) = published_results(connection)
    assert (failed.execution_id, failed.status) == ("e-garbled", "FAILED")
    assert failed.message is not None and "cannot be read" in failed.message


def test_a_recall_whose_leader_went_before_its_commit_is_finished(
    engine: Engine, connection: BlockingConnection, stack: Stack
) -> None:
    # The recall fenced the run, then its transaction never committed: the copy in the
    # worker's queue is dropped when reached, so the row must go back to the firer.
    queued_on(engine, "e-recalled", "w1")
    stack.client.set(stack.keys.execution_started("e-recalled"), RECALLED)
    before = reconciled("unfinished_recall")
    stack.reconciler.sweep()
    assert published_results(connection) == [], "nothing to report: it never ran"
    with engine.connect() as conn:
        status, worker, message, dispatched = conn.execute(
            sa.text(
                "SELECT status, worker_id, message, dispatched_at FROM executions "
                "WHERE execution_id = 'e-recalled'"
            )
        ).one()
    assert (status, worker, message) == ("SCHEDULED", None, SLOT_WAIT)
    assert dispatched is not None, "the firer lifts the fence of a row that has one"
    assert stack.started("e-recalled") == RECALLED
    assert reconciled("unfinished_recall") == before + 1
