"""A transaction left open by a paused or cut-off dispatcher holds rows; nobody else
waits on them for long, and what they hold back is only what touches them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Connection, Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.engine import lock_waits_of, make_engine
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.messages import ExecutionResult
from common.schedule import MisfirePolicy
from common.states import ExecutionStatus
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.outcomes.callbacks import republish_stale_deliveries
from services.dispatcher.outcomes.recording import record_each_alone_if_need_be
from tests.integration.helpers import make_app, register_worker
from tests.integration.test_firing import firer, job_status, job_with, scheduled, statuses
from tests.integration.test_rescue import execution_row, make_recovery, queued_on, worker_state

RESULTS = 40
# The steps that must wait for no lock run on sessions that would wait this long for one
# (under the 30 s after which MariaDB ends the holder's idle transaction): a step that
# waited for a held row would take all of it, one that waits for none takes
# milliseconds, and NO_LOCK_WAIT_S lies far from both, however busy the machine is.
STEP_LOCK_WAIT_S = 24
NO_LOCK_WAIT_S = 12.0


@pytest.fixture
def patient_engine(namespace: StoreSettings) -> Iterator[Engine]:
    """An engine whose sessions wait ``STEP_LOCK_WAIT_S`` for a lock."""
    update = {"database_lock_wait_seconds": STEP_LOCK_WAIT_S}
    built = make_engine(namespace.model_copy(update=update))
    yield built
    built.dispose()


def pending(engine: Engine, count: int) -> list[str]:
    make_app(engine)
    ids = [f"held-{n}" for n in range(count)]
    with engine.begin() as conn:
        job_ids = [
            insert_job(conn, NewJob(1, f"j{n}", "demo.noop", {}, None, 0, None, None, None), 0)
            for n in range(count)
        ]
        rows = [NewExecution(e, j, 1, 0, 0) for e, j in zip(ids, job_ids, strict=True)]
        insert_executions(conn, rows, 0)
    return ids


def succeeded(execution_id: str) -> ExecutionResult:
    return ExecutionResult(
        execution_id=execution_id,
        job_id=1,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=1,
        ended_at=2,
    )


def test_every_session_bounds_its_lock_waits_and_idle_transactions(
    namespace: StoreSettings,
) -> None:
    engine = make_engine(namespace.model_copy(update={"database_lock_wait_seconds": 3}))
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text(
                    "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.lock_wait_timeout, "
                    "@@SESSION.idle_transaction_timeout"
                )
            ).one()
            assert tuple(found) == (3, 3, namespace.database_idle_transaction_seconds)
            with lock_waits_of(conn, 0):
                assert conn.execute(sa.text("SELECT @@innodb_lock_wait_timeout")).scalar() == 0
            assert conn.execute(sa.text("SELECT @@innodb_lock_wait_timeout")).scalar() == 3
    finally:
        engine.dispose()


def test_results_go_on_past_rows_an_open_transaction_holds(
    engine: Engine, redis_client: redis.Redis
) -> None:
    ids = pending(engine, RESULTS)
    held = ids[::10]
    stalled = engine.connect()
    stalled.begin()
    # A paused dispatcher's open transaction: the rows stay locked as long as it lasts.
    stalled.execute(
        sa.text("SELECT id FROM executions WHERE execution_id IN :ids FOR UPDATE").bindparams(
            sa.bindparam("ids", expanding=True)
        ),
        {"ids": held},
    )
    try:
        began = time.monotonic()
        recorded = record_each_alone_if_need_be(
            engine, ClusterClock(redis_client), [succeeded(e) for e in ids]
        )
        took = time.monotonic() - began
    finally:
        stalled.rollback()
        stalled.close()
    assert sorted(r.execution_id for r in recorded.deferred) == sorted(held)
    assert not recorded.set_aside
    found = statuses(engine)
    assert {e for e, s in found.items() if s == "SUCCEEDED"} == set(ids) - set(held)
    # One lock wait of the batch's at most, not one per held row.
    assert took < 10, f"recording took {took:.1f} s"
    again = record_each_alone_if_need_be(
        engine, ClusterClock(redis_client), [succeeded(e) for e in held]
    )
    assert not again.deferred
    assert set(statuses(engine).values()) == {"SUCCEEDED"}


def test_a_skip_whose_job_row_is_held_waits_for_a_later_pass_not_for_the_lock(
    engine: Engine,
    patient_engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
) -> None:
    """A one-shot job's trigger fired too late for its misfire policy is skipped, which
    ends the job: while another transaction holds the job's row, the skip waits for a
    later pass and the fire goes on at once."""
    make_app(engine)
    fire = firer(patient_engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    one_shot = job_with(engine, misfire_policy=MisfirePolicy.SKIP)
    other = job_with(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'RUNNING'"))
    scheduled(engine, one_shot, "e-late", now - 120_000)
    scheduled(engine, other, "e-due", now - 10)
    fire.load()
    with engine.connect() as held, held.begin():
        held.execute(sa.text("SELECT id FROM jobs WHERE id = :j FOR UPDATE"), {"j": one_shot})
        began = time.monotonic()
        assert fire.fire_due() == 1
        took = time.monotonic() - began
    assert took < NO_LOCK_WAIT_S, f"the fire waited {took:.1f} s for the held row"
    assert statuses(engine) == {"e-late": "SCHEDULED", "e-due": "QUEUED"}
    fire.load()
    assert fire.fire_due() == 0
    assert statuses(engine)["e-late"] == "SKIPPED"
    assert job_status(engine, one_shot) == "FAILED"


def holding(engine: Engine, statement: str, params: dict[str, object]) -> Connection:
    """An open transaction, as a paused ex-leader leaves it, holding the rows
    ``statement`` locks; the caller rolls it back."""
    held = engine.connect()
    held.begin()
    held.execute(sa.text(statement), params)
    return held


def test_the_rescue_moves_what_it_can_and_passes_over_rows_another_transaction_holds(
    engine: Engine,
    patient_engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    """A dead worker's unstarted work moves at once but for the rows a paused ex-leader
    holds, which move on a later pass: no lock wait keeps the sweep past the stall limit."""
    make_app(engine)
    clock = ClusterClock(redis_client)
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, "dead")
    register_worker(engine, "dead", now_ms=0)
    # Room for all 20 in its queue (capacity 10: 10 running, 10 more due soon).
    register_worker(engine, "live", now_ms=clock.now_ms(), capacity=10)
    channel.basic_consume(declare_worker_queue(channel, "live"), lambda *_: None)
    ids = [f"e-{n}" for n in range(20)]
    for execution_id in ids:
        queued_on(engine, execution_id, "dead")
    kept = ids[::5]
    recovery = make_recovery(patient_engine, redis_client, connection, namespace)
    held = holding(
        engine,
        "SELECT id FROM executions WHERE execution_id IN :ids FOR UPDATE",
        {"ids": kept},
    )
    try:
        began = time.monotonic()
        recovery.rescue_dead_workers()
        took = time.monotonic() - began
    finally:
        held.rollback()
        held.close()
    assert took < NO_LOCK_WAIT_S, f"the rescue waited {took:.1f} s for held rows"
    for execution_id in ids:
        expected = "dead" if execution_id in kept else "live"
        assert execution_row(engine, execution_id) == ("QUEUED", expected)
    recovery.rescue_dead_workers()
    assert {execution_row(engine, e) for e in ids} == {("QUEUED", "live")}


def test_forgetting_a_worker_whose_row_is_held_waits_for_a_later_pass(
    engine: Engine,
    patient_engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    """A paused ex-leader stopped between marking a worker forgotten and deleting its
    queue holds the worker's row: the new leader passes over it, not waits for it."""
    make_app(engine)
    channel = connection.channel()
    declare_core(channel)
    now = ClusterClock(redis_client).now_ms()
    for worker_id in ("old-1", "old-2"):
        declare_worker_queue(channel, worker_id)
        register_worker(engine, worker_id, now_ms=now - 7_200_000)
    recovery = make_recovery(
        patient_engine, redis_client, connection, namespace, forget_ms=3_600_000
    )
    held = holding(engine, "SELECT * FROM workers WHERE worker_id = :w FOR UPDATE", {"w": "old-1"})
    try:
        began = time.monotonic()
        recovery.rescue_dead_workers()
        took = time.monotonic() - began
    finally:
        held.rollback()
        held.close()
    assert took < NO_LOCK_WAIT_S, f"the forget waited {took:.1f} s for a held row"
    assert (worker_state(engine, "old-1"), worker_state(engine, "old-2")) == (
        "ACTIVE",
        "FORGOTTEN",
    )
    recovery.rescue_dead_workers()
    assert worker_state(engine, "old-1") == "FORGOTTEN"


def pending_delivery(engine: Engine, delivery_id: str) -> None:
    with engine.begin() as conn:
        job_id = insert_job(
            conn, NewJob(1, delivery_id, "demo.noop", {}, None, 0, None, None, None), 0
        )
        MySqlDeliveryStore(conn).insert_deliveries(
            [NewDelivery(delivery_id, f"x-{delivery_id}", job_id, 1, "http://h/", "{}")], 0
        )


def delivery_statuses(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT delivery_id, status FROM callback_deliveries")).all()
    return {str(r.delivery_id): str(r.status) for r in rows}


def test_callbacks_republished_pass_over_deliveries_another_transaction_holds(
    engine: Engine,
    patient_engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
) -> None:
    make_app(engine)
    declare_core(connection.channel())
    for n in range(5):
        pending_delivery(engine, f"d-{n}")
    clock = ClusterClock(redis_client)
    publisher = BatchPublisher(connection.channel())
    held = holding(
        engine, "SELECT * FROM callback_deliveries WHERE delivery_id = :d FOR UPDATE", {"d": "d-0"}
    )
    try:
        began = time.monotonic()
        republish_stale_deliveries(patient_engine, publisher, clock, 1)
        took = time.monotonic() - began
    finally:
        held.rollback()
        held.close()
    assert took < NO_LOCK_WAIT_S, f"the republish waited {took:.1f} s for a held row"
    found = delivery_statuses(engine)
    assert found.pop("d-0") == "PENDING"
    assert set(found.values()) == {"QUEUED"}
    republish_stale_deliveries(patient_engine, publisher, clock, 1)
    assert set(delivery_statuses(engine).values()) == {"QUEUED"}
