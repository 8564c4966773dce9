"""The leader's dead-worker sweep on real MySQL, Redis and RabbitMQ."""

from __future__ import annotations

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.executions import (
    NewExecution,
    insert_executions,
    mark_queued,
    primary_keys,
)
from common.db.jobs import NewJob, insert_job
from common.db.worker_moves import reassign
from common.db.workers import MySqlWorkerTransactions
from common.keys import RedisKeys
from common.loadbalance import WorkerChooser
from common.messages import ExecutionResult, ResultBatch
from common.states import ExecutionStatus, WorkerState
from common.stores import Stores
from common.topology import RESULTS_QUEUE, declare_core, declare_worker_queue, worker_queue
from services.dispatcher.routing.route import Router
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.upkeep import rescue as recovery_module
from services.dispatcher.upkeep.rescue import Rescue, RescueSettings
from tests.integration.helpers import make_app, register_worker


@pytest.fixture
def channel(engine: Engine, connection: BlockingConnection) -> BlockingChannel:
    """A channel with the core topology declared, in a namespace with an app."""
    make_app(engine)
    opened = connection.channel()
    declare_core(opened)
    return opened


def queued_on(engine: Engine, execution_id: str, worker_id: str, handler: str = "demo.noop") -> int:
    with engine.begin() as conn:
        job_id = insert_job(
            conn, NewJob(1, execution_id, handler, {}, None, 0, None, None, None), 0
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


def make_recovery(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
    directory: WorkerDirectory | None = None,
    forget_ms: int = 0,
) -> Rescue:
    stores = Stores.build(namespace, engine, redis_client)
    # Redis has kept its data since before any of these executions was dispatched.
    redis_client.set(stores.keys.started_epoch, -3_600_000, nx=True)
    return Rescue.on_stores(
        stores,
        BatchPublisher(connection.channel()),
        Router(
            directory
            or WorkerDirectory(MySqlWorkerTransactions(engine), connection, stores.clock, 60_000),
            WorkerChooser(),
        ),
        RescueSettings(stale_ms=1_000, forget_ms=forget_ms),
    )


def test_a_dead_workers_runs_are_lost_reported_or_moved_by_their_started_keys(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    make_app(engine)
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
        status=ExecutionStatus.SUCCEEDED,
        started_at=20,
        ended_at=30,
    )
    redis_client.set(keys.execution_started("e-running"), "dead")
    redis_client.set(keys.execution_started("e-ended"), "dead\n" + stored.model_dump_json())
    make_recovery(engine, redis_client, connection, namespace).rescue_dead_workers()
    by_execution = {r.execution_id: r for r in published_results(connection)}
    assert by_execution["e-ended"] == stored
    assert by_execution["e-running"].status == "LOST"
    assert by_execution["e-running"].job_id == running
    assert "e-waiting" not in by_execution


def execution_row(engine: Engine, execution_id: str) -> tuple[str, str | None]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT status, worker_id FROM executions WHERE execution_id = :e"),
            {"e": execution_id},
        ).one()
    return str(row[0]), row[1]


def test_work_moved_to_a_worker_the_broker_cannot_route_to_goes_back_to_the_firer(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    make_app(engine)
    clock = ClusterClock(redis_client)
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, "dead")
    register_worker(engine, "dead", now_ms=0)
    register_worker(engine, "gone", now_ms=clock.now_ms())
    gone_queue = declare_worker_queue(channel, "gone")
    channel.basic_consume(gone_queue, lambda *_: None)
    queued_on(engine, "e-waiting", "dead")
    directory = WorkerDirectory(MySqlWorkerTransactions(engine), connection, clock, 60_000, ttl=60)
    assert [w.worker_id for w in directory.live()] == ["gone"]
    # The queue goes between the directory's look and the move (the view is cached).
    connection.channel().queue_delete(gone_queue)
    make_recovery(engine, redis_client, connection, namespace, directory).rescue_dead_workers()
    # No queue took the message: left QUEUED on "gone" it would wait for good.
    assert execution_row(engine, "e-waiting") == ("SCHEDULED", None)


def test_work_no_live_worker_runs_goes_back_to_the_firer_and_the_rest_is_moved(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fewer rows per sweep than the dead worker holds of a handler no live worker runs:
    # left QUEUED there, those rows would be read first at every sweep, for good.
    monkeypatch.setattr(recovery_module, "SWEEP_LIMIT", 2)
    make_app(engine)
    clock = ClusterClock(redis_client)
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, "dead")
    register_worker(engine, "dead", now_ms=0, handlers=("demo.noop", "only.dead"))
    register_worker(engine, "live", now_ms=clock.now_ms())
    channel.basic_consume(declare_worker_queue(channel, "live"), lambda *_: None)
    orphans = ["e-orphan-1", "e-orphan-2"]
    for execution_id in orphans:
        queued_on(engine, execution_id, "dead", handler="only.dead")
    queued_on(engine, "e-movable", "dead")
    recovery = make_recovery(engine, redis_client, connection, namespace)
    recovery.rescue_dead_workers()
    recovery.rescue_dead_workers()
    assert execution_row(engine, "e-movable") == ("QUEUED", "live")
    for execution_id in orphans:
        assert execution_row(engine, execution_id) == ("SCHEDULED", None)
    with engine.connect() as conn:
        messages = conn.execute(
            sa.text("SELECT DISTINCT message FROM executions WHERE status = 'SCHEDULED'")
        ).scalars()
        assert list(messages) == ["waiting: no live worker runs handler 'only.dead'"]


def test_a_row_that_ended_is_not_moved(engine: Engine) -> None:
    make_app(engine)
    queued_on(engine, "e-1", "dead")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE executions SET status = 'SUCCEEDED'"))
        assert not reassign(conn, "e-1", "dead", "w2", 0)
    assert execution_row(engine, "e-1") == ("SUCCEEDED", "dead")


def worker_state(engine: Engine, worker_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                sa.text("SELECT state FROM workers WHERE worker_id = :w"), {"w": worker_id}
            ).scalar()
        )


def queue_exists(connection: BlockingConnection, worker_id: str) -> bool:
    channel = connection.channel()
    try:
        channel.queue_declare(worker_queue(worker_id), passive=True)
    except ChannelClosedByBroker:
        return False
    channel.close()
    return True


def test_a_worker_gone_long_with_nothing_on_it_is_forgotten_and_its_queue_deleted(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    now = ClusterClock(redis_client).now_ms()
    for worker_id, heard in (("old", now - 7_200_000), ("recent", now - 60_000)):
        declare_worker_queue(channel, worker_id)
        register_worker(engine, worker_id, now_ms=heard)
    queued_on(engine, "e-1", "old")  # no live worker to move it to, yet
    recovery = make_recovery(engine, redis_client, connection, namespace, forget_ms=3_600_000)
    recovery.rescue_dead_workers()
    assert worker_state(engine, "old") == "ACTIVE"  # work still on it: kept
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE executions SET status = 'SUCCEEDED'"))
    recovery.rescue_dead_workers()
    assert worker_state(engine, "old") == "FORGOTTEN"
    assert not queue_exists(connection, "old")
    assert worker_state(engine, "recent") == "ACTIVE"  # gone, not for long enough
    assert queue_exists(connection, "recent")
    with MySqlWorkerTransactions(engine).reading() as workers:
        assert [w.worker_id for w in workers.gone_workers(now)] == ["recent"]
    register_worker(engine, "old", now_ms=now)  # it comes back
    assert worker_state(engine, "old") == "ACTIVE"


def test_a_worker_consuming_again_keeps_its_queue(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    register_worker(engine, "back", now_ms=0)
    channel.basic_consume(declare_worker_queue(channel, "back"), lambda *_: None)
    make_recovery(
        engine, redis_client, connection, namespace, forget_ms=1_000
    ).rescue_dead_workers()
    assert worker_state(engine, "back") == "ACTIVE"
    assert queue_exists(connection, "back")
    directory = WorkerDirectory(
        MySqlWorkerTransactions(engine), connection, ClusterClock(redis_client), 60_000
    )
    assert not directory.delete_queue("back")  # the broker keeps a queue in use
    assert queue_exists(connection, "back")


def test_workers_that_still_have_work_do_not_use_up_the_forgets_of_a_sweep(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recovery_module, "FORGET_PER_SWEEP", 1)
    now = ClusterClock(redis_client).now_ms()
    for worker_id, heard in (("busy", now - 9_000_000), ("free", now - 8_000_000)):
        declare_worker_queue(channel, worker_id)
        register_worker(engine, worker_id, now_ms=heard)
    queued_on(engine, "e-1", "busy")  # no live worker to move it to
    make_recovery(
        engine, redis_client, connection, namespace, forget_ms=3_600_000
    ).rescue_dead_workers()
    assert worker_state(engine, "busy") == "ACTIVE"
    assert worker_state(engine, "free") == "FORGOTTEN"


def test_a_forget_whose_queue_has_a_consumer_again_is_undone(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    now = ClusterClock(redis_client).now_ms()
    register_worker(engine, "back", now_ms=now - 9_000_000)
    # It consumes again between the sweep's look at its queue and the forget.
    channel.basic_consume(declare_worker_queue(channel, "back"), lambda *_: None)
    recovery = make_recovery(engine, redis_client, connection, namespace, forget_ms=3_600_000)
    assert not recovery._forget("back", now - 9_000_000, now)
    assert worker_state(engine, "back") == "ACTIVE"
    assert queue_exists(connection, "back")


def lose_redis_data(client: redis.Redis, namespace: StoreSettings) -> None:
    """What a flush does to this namespace's keys (the server is shared: no FLUSHALL)."""
    for key in client.scan_iter(f"{namespace.namespace}:*"):
        client.delete(key)


def test_a_dead_workers_keyless_run_from_before_redis_lost_its_data_is_lost_not_moved(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    keys = RedisKeys(namespace.namespace)
    clock = ClusterClock(redis_client)
    declare_worker_queue(channel, "dead")
    register_worker(engine, "dead", now_ms=0)
    register_worker(engine, "live", now_ms=clock.now_ms())
    channel.basic_consume(declare_worker_queue(channel, "live"), lambda *_: None)
    queued_on(engine, "e-running", "dead")
    redis_client.set(keys.execution_started("e-running"), "dead")
    recovery = make_recovery(engine, redis_client, connection, namespace)
    lose_redis_data(redis_client, namespace)  # the started key goes with the rest
    later = clock.now_ms() + 60_000
    queued_on(engine, "e-sent-since", "dead")
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE executions SET dispatched_at = :t WHERE execution_id = 'e-sent-since'"),
            {"t": later},
        )
    recovery.rescue_dead_workers()
    by_execution = {r.execution_id: r for r in published_results(connection)}
    assert by_execution["e-running"].status == "LOST"
    assert "e-sent-since" not in by_execution
    assert execution_row(engine, "e-sent-since") == ("QUEUED", "live")


def test_a_stale_worker_that_still_consumes_keeps_its_runs(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    # Its heartbeat is stale (cut off from MySQL and Redis, or paused), but the broker
    # still sees it consume: it is alive, and its runs are not taken from it.
    keys = RedisKeys(namespace.namespace)
    clock = ClusterClock(redis_client)
    register_worker(engine, "slow", now_ms=0)
    channel.basic_consume(declare_worker_queue(channel, "slow"), lambda *_: None)
    register_worker(engine, "live", now_ms=clock.now_ms())
    channel.basic_consume(declare_worker_queue(channel, "live"), lambda *_: None)
    queued_on(engine, "e-running", "slow")
    queued_on(engine, "e-waiting", "slow")
    redis_client.set(keys.execution_started("e-running"), "slow")
    make_recovery(engine, redis_client, connection, namespace).rescue_dead_workers()
    assert published_results(connection) == []
    assert execution_row(engine, "e-running") == ("QUEUED", "slow")
    assert execution_row(engine, "e-waiting") == ("QUEUED", "slow")


def test_a_stopped_workers_unstarted_work_moves_to_a_live_worker(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    clock = ClusterClock(redis_client)
    now = clock.now_ms()
    declare_worker_queue(channel, "stopped")
    register_worker(engine, "stopped", now_ms=now, state=WorkerState.STOPPED)
    register_worker(engine, "live", now_ms=now)
    bodies: list[bytes] = []
    channel.basic_consume(
        declare_worker_queue(channel, "live"), lambda *args: bodies.append(args[3])
    )
    queued_on(engine, "e-waiting", "stopped")
    make_recovery(engine, redis_client, connection, namespace).rescue_dead_workers()
    assert execution_row(engine, "e-waiting") == ("QUEUED", "live")
    connection.process_data_events(time_limit=1)
    assert len(bodies) == 1 and b"e-waiting" in bodies[0]
    assert published_results(connection) == []


def test_a_draining_workers_unstarted_work_moves_and_its_runs_stay(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    keys = RedisKeys(namespace.namespace)
    now = ClusterClock(redis_client).now_ms()
    declare_worker_queue(channel, "drained")  # it stopped consuming
    register_worker(engine, "drained", now_ms=now, state=WorkerState.DRAINING)
    register_worker(engine, "live", now_ms=now)
    channel.basic_consume(declare_worker_queue(channel, "live"), lambda *_: None)
    queued_on(engine, "e-running", "drained")
    queued_on(engine, "e-waiting", "drained")
    redis_client.set(keys.execution_started("e-running"), "drained")
    recovery = make_recovery(engine, redis_client, connection, namespace)
    recovery.rescue_dead_workers()  # not dead: fresh, and it says it drains
    assert execution_row(engine, "e-waiting") == ("QUEUED", "drained")
    recovery.move_off_draining_workers()
    assert execution_row(engine, "e-waiting") == ("QUEUED", "live")
    assert execution_row(engine, "e-running") == ("QUEUED", "drained")
    assert published_results(connection) == []


def test_a_draining_worker_still_consuming_keeps_its_work(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    channel: BlockingChannel,
    namespace: StoreSettings,
) -> None:
    now = ClusterClock(redis_client).now_ms()
    register_worker(engine, "draining", now_ms=now, state=WorkerState.DRAINING)
    channel.basic_consume(declare_worker_queue(channel, "draining"), lambda *_: None)
    register_worker(engine, "live", now_ms=now)
    channel.basic_consume(declare_worker_queue(channel, "live"), lambda *_: None)
    queued_on(engine, "e-waiting", "draining")
    make_recovery(engine, redis_client, connection, namespace).move_off_draining_workers()
    assert execution_row(engine, "e-waiting") == ("QUEUED", "draining")
