"""A worker's serving loop on real RabbitMQ and Redis: its slots, and packs with a bad item."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.clock import ClusterClock
from common.config import StoreSettings, WorkerSettings
from common.consumer.pooled import PooledConsumer
from common.consumer.stats import ConsumerStats
from common.consumer.work import ConsumerSettings, ConsumerWork
from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.jobs import NewJob, insert_job
from common.keys import WORKER_INCARNATION, RedisKeys
from common.messages import DispatchMessage, DispatchPack, ExecutionResult, ResultBatch
from common.started_marks import parse_started
from common.states import ExecutionStatus, WorkerState
from common.stores import Stores
from common.topology import (
    DISPATCH_EXCHANGE,
    RESULTS_QUEUE,
    declare_core,
    declare_worker_queue,
    worker_queue,
)
from services.cli import main
from services.worker import main as worker_main
from services.worker.fence import Fence
from services.worker.heartbeat import Heartbeater, HeartbeatHooks, Load, WorkerIdentity
from services.worker.main import _Serving
from services.worker.packs import DispatchPacking
from services.worker.registry import HandlerContext, HandlerFn
from services.worker.runner import ExecutionRunner
from tests.integration.helpers import make_app

GATE = threading.Event()
RAN: list[str] = []


def stuck(params: dict[str, Any], ctx: HandlerContext) -> None:
    GATE.wait(60)


def counted(params: dict[str, Any], ctx: HandlerContext) -> None:
    RAN.append(ctx.execution_id)


def wait_for(check: Callable[[], Any], what: str, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


class WorkerInThread:
    """The worker's serving loop, wired as ``kairos worker`` wires it, in a thread."""

    def __init__(
        self,
        namespace: StoreSettings,
        client: redis.Redis,
        engine: Engine,
        capacity: int,
        fence: Fence | None = None,
    ) -> None:
        handlers: dict[str, HandlerFn] = {"t.stuck": stuck, "t.count": counted}
        keys, clock = RedisKeys(namespace.namespace), ClusterClock(client)
        settings = WorkerSettings(namespace=namespace.namespace, capacity=capacity)
        self.runner = ExecutionRunner("w1", handlers, client, keys, clock, 60)
        stores = Stores(namespace, engine, client, keys, clock)
        self.serving = _Serving(settings, "w1", self.runner, ConsumerStats(), fence, stores)
        identity = WorkerIdentity("w1", capacity, tuple(handlers))
        hooks = HeartbeatHooks(on_drained=self.serving.set_drained, on_reopen=self.serving.wake)
        identity = replace(identity, incarnation=self.serving.incarnation)
        self.heartbeat = Heartbeater(identity, self.serving, stores, 60, hooks, fence)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serving.serve, args=(self.stop, self.heartbeat))
        self.connection = connect(namespace, "test")
        channel = self.connection.channel()
        declare_core(channel)
        declare_worker_queue(channel, "w1")
        self.publisher = BatchPublisher(self.connection.channel())
        self.results: dict[str, ExecutionResult] = {}

    def send(self, execution_id: str, handler: str, timeout: int | None = None) -> None:
        message = DispatchMessage(
            execution_id=execution_id,
            job_id=1,
            attempt=1,
            trigger_time=0,
            handler=handler,
            params={},
            dispatched_at=0,
            timeout_seconds=timeout,
        )
        self.send_raw(DispatchPack(executions=[message]).model_dump_json().encode(), execution_id)

    def send_raw(self, body: bytes, message_id: str) -> None:
        self.publisher.publish([OutgoingMessage(DISPATCH_EXCHANGE, "w1", body, message_id)])

    def result(self, execution_id: str) -> ExecutionResult:
        def found() -> ExecutionResult | None:
            channel = self.connection.channel()
            while True:
                method, _props, body = channel.basic_get(RESULTS_QUEUE, auto_ack=True)
                if method is None:
                    break
                for item in ResultBatch.model_validate_json(body).results:
                    self.results[item.execution_id] = item
            channel.close()
            return self.results.get(execution_id)

        outcome: ExecutionResult = wait_for(found, f"the result of {execution_id}")
        return outcome

    def close(self) -> None:
        GATE.set()
        self.stop.set()
        self.thread.join(60)
        self.connection.close()


@pytest.fixture
def worker(
    namespace: StoreSettings, redis_client: redis.Redis, engine: Engine
) -> Iterator[WorkerInThread]:
    GATE.clear()
    RAN.clear()
    running = WorkerInThread(namespace, redis_client, engine, capacity=1)
    running.thread.start()
    wait_for(lambda: running.serving.consumer is not None, "the worker to consume")
    yield running
    running.close()


def overrunning() -> float | None:
    return REGISTRY.get_sample_value("kairos_worker_overrunning_runs")


def test_a_timed_out_run_holds_its_slot_until_its_thread_ends(
    worker: WorkerInThread, namespace: StoreSettings
) -> None:
    worker.send("a", "t.stuck", timeout=1)
    timed_out = worker.result("a")
    assert timed_out.status == "TIMED_OUT"
    assert timed_out.message is not None and "holding a worker slot" in timed_out.message
    assert worker.serving.load() == Load(active=1, overrun=1)
    assert overrunning() == 1
    beat = worker.heartbeat.build()
    assert (beat.active, beat.overrun) == (1, 1)

    worker.send("b", "t.count")
    consumer = worker.serving.consumer
    assert consumer is not None
    wait_for(lambda: RAN or consumer.waiting == 1, "b to arrive")
    assert RAN == [], "b ran while a's thread still held the only slot"

    GATE.set()  # a's thread ends: its slot is free, and b starts in it
    assert worker.result("b").status == "SUCCEEDED"
    assert RAN == ["b"]
    wait_for(lambda: worker.serving.load() == Load(active=0, overrun=0), "the slots to free")
    assert overrunning() == 0


def test_kairos_workers_shows_the_overrunning_runs(
    worker: WorkerInThread,
    namespace: StoreSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker.send("a", "t.stuck", timeout=1)
    assert worker.result("a").status == "TIMED_OUT"
    worker.heartbeat.send()
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    capsys.readouterr()
    assert main(["workers", "-o", "json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["workers"]
    assert (shown["active"], shown["overrun"]) == (1, 1)


def test_a_pack_with_one_unreadable_execution_runs_the_rest_and_fails_that_one(
    worker: WorkerInThread,
) -> None:
    def item(n: int, params: str) -> str:
        return (
            f'{{"v":1,"execution_id":"p-{n}","job_id":{n},"attempt":1,"trigger_time":0,'
            f'"handler":"t.count","params":{params},"dispatched_at":0,"ref":{n}}}'
        )

    poison = "[" * 5_000 + "]" * 5_000
    items = [item(n, poison if n == 7 else "{}") for n in range(50)]
    worker.send_raw(('{"v":1,"executions":[' + ",".join(items) + "]}").encode(), "pack")
    outcomes = {n: worker.result(f"p-{n}") for n in range(50)}
    failed = {n for n, outcome in outcomes.items() if outcome.status == "FAILED"}
    assert failed == {7}
    assert "cannot read its dispatch" in (outcomes[7].message or "")
    assert sorted(RAN) == sorted(f"p-{n}" for n in range(50) if n != 7)


def after_an_admission_pass(consumer: PooledConsumer[Any, Any, Any]) -> None:
    """Return once the consumer has looked for runs to start since the last delivery
    arrived: its connection runs callbacks in order, and each arrival queues a look."""
    looked = threading.Event()
    consumer._connection.add_callback_threadsafe(looked.set)
    assert looked.wait(30), "the consumer's connection runs no callbacks"


def test_a_worker_that_cannot_heartbeat_starts_no_new_run_until_one_lands(
    namespace: StoreSettings, redis_client: redis.Redis, engine: Engine
) -> None:
    RAN.clear()
    now = [0.0]
    fence = Fence(interval=1.0, clock=lambda: now[0])
    worker = WorkerInThread(namespace, redis_client, engine, capacity=2, fence=fence)
    worker.thread.start()
    try:
        consumer = wait_for(lambda: worker.serving.consumer, "the worker to consume")
        worker.send("before", "t.count")
        assert worker.result("before").status == "SUCCEEDED"
        now[0] = 2.5  # no heartbeat has landed for longer than two intervals
        worker.send("during", "t.count")
        wait_for(lambda: RAN != ["before"] or consumer.waiting == 1, "the delivery to arrive")
        after_an_admission_pass(consumer)
        assert RAN == ["before"] and consumer.waiting == 1, "a run started while fenced"
        worker.heartbeat.send()  # one lands: the fence opens and the run starts
        assert worker.result("during").status == "SUCCEEDED"
        assert RAN == ["before", "during"]
    finally:
        worker.close()


def queued_on_w1(engine: Engine, execution_id: str) -> int:
    with engine.begin() as conn:
        job_id = insert_job(
            conn, NewJob(1, execution_id, "t.count", {}, None, 0, None, None, None), 0
        )
        insert_executions(conn, [NewExecution(execution_id, job_id, 1, 0, 0)], 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, [execution_id]), "w1"), 10)
    return job_id


def test_a_worker_restarted_with_its_id_settles_the_runs_its_previous_process_left(
    namespace: StoreSettings, redis_client: redis.Redis, engine: Engine
) -> None:
    # The previous process ran a long job acked early, then was restarted within the
    # staleness window: no delivery comes back, and the leader never sees it dead.
    make_app(engine)
    keys = RedisKeys(namespace.namespace)
    left = queued_on_w1(engine, "e-acked-early")
    ended = queued_on_w1(engine, "e-ended")
    queued_on_w1(engine, "e-waiting")
    stored = ExecutionResult(
        execution_id="e-ended",
        job_id=ended,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=20,
        ended_at=30,
    )
    redis_client.set(keys.execution_started("e-acked-early"), "w1")
    redis_client.set(keys.execution_started("e-ended"), "w1\n" + stored.model_dump_json())
    worker = WorkerInThread(namespace, redis_client, engine, capacity=1)
    worker.thread.start()
    try:
        lost = worker.result("e-acked-early")
        assert (lost.status, lost.job_id) == ("LOST", left)
        assert "restarted" in (lost.message or "")
        assert worker.result("e-ended") == stored
        assert "e-waiting" not in worker.results
        worker.heartbeat.send()
        sent = redis_client.hget(keys.worker("w1"), WORKER_INCARNATION)
        assert sent == worker.serving.incarnation.encode()
    finally:
        worker.close()


def test_a_run_ending_after_the_drain_grace_still_reports_its_result(
    namespace: StoreSettings,
    redis_client: redis.Redis,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_main, "DRAIN_GRACE_SECONDS", 0.2)
    GATE.clear()
    worker = WorkerInThread(namespace, redis_client, engine, capacity=1)
    worker.thread.start()
    try:
        consumer = wait_for(lambda: worker.serving.consumer, "the worker to consume")
        worker.send("long", "t.stuck")
        wait_for(lambda: consumer.active == 1, "the run to start")
        worker.stop.set()  # SIGTERM
        wait_for(lambda: worker.heartbeat.state is WorkerState.DRAINING, "the drain")
        time.sleep(0.5)  # past the grace
        GATE.set()
        assert worker.result("long").status == "SUCCEEDED"
    finally:
        worker.close()


def test_an_outcome_the_connection_lost_is_kept_with_its_started_key(
    namespace: StoreSettings, redis_client: redis.Redis, engine: Engine
) -> None:
    GATE.clear()
    keys = RedisKeys(namespace.namespace)
    worker = WorkerInThread(namespace, redis_client, engine, capacity=1)
    worker.send("long", "t.stuck")
    connection = connect(namespace, "w1")
    setup = connection.channel()
    declare_core(setup)
    consumer = PooledConsumer(
        connection,
        ConsumerSettings(declare_worker_queue(setup, "w1"), 1),
        ConsumerWork(
            DispatchPacking(),
            worker.runner.admit,
            worker.runner.execute,
            worker.runner.report,
            orphaned=worker.runner.keep_outcome,
        ),
    )
    consumer.start()
    while consumer.active == 0:
        connection.process_data_events(time_limit=0.05)
    consumer.close()
    connection.close()  # the broker connection drops mid-run
    GATE.set()
    stored = wait_for(
        lambda: parse_started(redis_client.get(keys.execution_started("long")))[1],
        "the outcome to be stored",
    )
    assert ExecutionResult.model_validate_json(stored).status == "SUCCEEDED"
    worker.connection.close()


def ready_in(worker: WorkerInThread, queue: str) -> int:
    channel = worker.connection.channel()
    count = int(channel.queue_declare(queue, passive=True).method.message_count)
    channel.close()
    return count


def consumers_of(worker: WorkerInThread, queue: str) -> int:
    """The consumers of ``queue``, as the broker counts them."""
    channel = worker.connection.channel()
    count = int(channel.queue_declare(queue, passive=True).method.consumer_count)
    channel.close()
    return count


def test_a_drained_worker_takes_nothing_new_until_it_is_undrained(
    worker: WorkerInThread, namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    keys = RedisKeys(namespace.namespace)
    redis_client.set(keys.worker_drained("w1"), "alice")
    worker.heartbeat.send()
    wait_for(lambda: worker.heartbeat.state is WorkerState.DRAINING, "the drain")
    worker.send("while-drained", "t.count")
    # Ready in a queue nobody consumes: nothing can take it, however long one waits.
    wait_for(lambda: ready_in(worker, worker_queue("w1")) == 1, "the message to be queued")
    assert consumers_of(worker, worker_queue("w1")) == 0 and RAN == []
    redis_client.delete(keys.worker_drained("w1"))
    worker.heartbeat.send()
    assert worker.result("while-drained").status == "SUCCEEDED"
    assert worker.heartbeat.state is WorkerState.ACTIVE


def reported_ms(engine: Engine) -> dict[str, int]:
    """The handler times w1's last heartbeat wrote."""
    with engine.connect() as conn:
        text = conn.exec_driver_sql("SELECT handler_ms FROM workers WHERE worker_id = 'w1'")
        value = text.scalar()
    return dict(json.loads(value)) if value else {}


def test_a_handler_whose_runs_grow_slow_is_reported_slow_while_its_run_goes(
    namespace: StoreSettings, redis_client: redis.Redis, engine: Engine
) -> None:
    # The leader prices a handler's runs by the time its worker reports for it. After a
    # stretch of quick runs, the window's mean would price runs of the same handler that
    # now take seconds at a millisecond for minutes, and the leader would fill the queue
    # with them. The heartbeat interval here is 60 s: only a heartbeat sent early for the
    # outgrown run can carry its time in time.
    GATE.set()
    worker = WorkerInThread(namespace, redis_client, engine, capacity=2)
    worker.thread.start()
    worker.heartbeat.start()
    try:
        wait_for(lambda: worker.serving.consumer, "the worker to consume")
        for n in range(20):
            worker.send(f"quick-{n}", "t.stuck")
        for n in range(20):
            assert worker.result(f"quick-{n}").status == "SUCCEEDED"
        quick = wait_for(lambda: reported_ms(engine).get("t.stuck"), "the first runs' time")
        assert quick < 50
        GATE.clear()
        worker.send("slow", "t.stuck")
        wait_for(lambda: reported_ms(engine)["t.stuck"] >= 300, "the slow run's time", 5.0)
        GATE.set()
        assert worker.result("slow").status == "SUCCEEDED"
    finally:
        worker.heartbeat.stop(WorkerState.STOPPED)
        worker.close()
