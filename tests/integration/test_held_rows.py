"""A transaction left open by a paused or cut-off dispatcher holds rows; nobody else
waits on them for long, and what they hold back is only what touches them."""

from __future__ import annotations

import time

import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.engine import lock_waits_of, make_engine
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.messages import ExecutionResult
from common.schedule import MisfirePolicy
from services.dispatcher.outcomes.record import record_each_alone_if_need_be
from tests.integration.helpers import make_app
from tests.integration.test_firing import firer, job_status, job_with, scheduled, statuses

RESULTS = 40


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
        status="SUCCEEDED",
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
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    """A one-shot job's trigger fired too late for its misfire policy is skipped, which
    ends the job: while another transaction holds the job's row, the skip waits for a
    later pass and the fire goes on at once."""
    make_app(engine)
    fire = firer(engine, redis_client, connection)
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
    assert took < 1.0, f"the fire waited {took:.1f} s for the held row"
    assert statuses(engine) == {"e-late": "SCHEDULED", "e-due": "QUEUED"}
    fire.load()
    assert fire.fire_due() == 0
    assert statuses(engine)["e-late"] == "SKIPPED"
    assert job_status(engine, one_shot) == "FAILED"
