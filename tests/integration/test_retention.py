"""Retention deletes old finished history and keeps everything else."""

from __future__ import annotations

import threading
import time
from typing import cast

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.db.retention import prune_executions
from common.db.workers import MySqlWorkerTransactions
from common.metrics import EXECUTIONS_DISPATCHED
from common.states import ExecutionStatus, WorkerState
from services.dispatcher.upkeep.retention import (
    FIRST_BATCH,
    BatchSize,
    RetentionLoop,
    prune,
    prune_deliveries,
)
from tests.integration.helpers import make_app, register_worker


class FixedClock:
    """The cluster clock, stopped at one instant."""

    def __init__(self, now_ms: int) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now


def count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


def test_old_finished_executions_go_and_the_rest_stay(engine: Engine) -> None:
    make_app(engine)
    with engine.begin() as conn:
        job_id = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        insert_executions(
            conn,
            [
                NewExecution("old-done", job_id, 1, 100, 100, ExecutionStatus.SUCCEEDED),
                NewExecution("old-failed", job_id, 2, 100, 100, ExecutionStatus.FAILED),
                NewExecution("old-waiting", job_id, 3, 100, 100),
                NewExecution("new-done", job_id, 1, 5_000, 5_000, ExecutionStatus.SUCCEEDED),
            ],
            100,
        )
        assert prune_executions(conn, 1_000, limit=10) == 2
    with engine.connect() as conn:
        left = set(conn.execute(sa.text("SELECT execution_id FROM executions")).scalars())
    assert left == {"old-waiting", "new-done"}


def test_pruning_is_bounded_by_its_batch(engine: Engine) -> None:
    make_app(engine)
    with engine.begin() as conn:
        job_id = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        insert_executions(
            conn,
            [
                NewExecution(f"e{i}", job_id, i + 1, 100, 100, ExecutionStatus.SUCCEEDED)
                for i in range(25)
            ],
            100,
        )
        assert prune_executions(conn, 1_000, limit=10) == 10
    assert count(engine, "executions") == 15


def test_settled_deliveries_go_pending_ones_stay(engine: Engine) -> None:
    make_app(engine)
    with engine.begin() as conn:
        job_id = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        MySqlDeliveryStore(conn).insert_deliveries(
            [
                NewDelivery("d1", "e1", job_id, 1, "http://x/", "{}"),
                NewDelivery("d2", "e2", job_id, 1, "http://x/", "{}"),
            ],
            100,
        )
        conn.execute(sa.text("UPDATE callback_deliveries SET status='DELIVERED' WHERE id=1"))
        assert prune_deliveries(conn, 1_000, limit=10) == 1
    assert count(engine, "callback_deliveries") == 1


def old_finished_executions(engine: Engine, count: int) -> None:
    make_app(engine)
    with engine.begin() as conn:
        job_id = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        for first in range(0, count, 5_000):
            rows = [
                NewExecution(f"e{i}", job_id, i + 1, 100, 100, ExecutionStatus.SUCCEEDED)
                for i in range(first, min(count, first + 5_000))
            ]
            insert_executions(conn, rows, 100)


def test_a_backlog_is_worked_off_in_batches_that_grow(
    engine: Engine, redis_client: redis.Redis
) -> None:
    """At full speed the pipeline finishes thousands of executions a second: one sweep
    deletes far more than one fixed batch while its batches come back full."""
    old_finished_executions(engine, 30_000)
    # Every batch counts as quick, however busy the box: what is tested is that a sweep
    # keeps deleting, in growing batches, while they come back full (the timing rule
    # itself has its own test below).
    size = BatchSize(target_s=60.0)
    clock = cast(ClusterClock, FixedClock(10_000))
    workers = MySqlWorkerTransactions(engine)
    gone = prune(engine, workers, clock, retention_ms=1_000, budget_s=30.0, size=size)
    assert gone == 30_000
    assert count(engine, "executions") == 0
    assert size.rows > FIRST_BATCH


def test_old_finished_jobs_and_forgotten_workers_go_once_their_history_has(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    with engine.begin() as conn:
        ids = [
            insert_job(conn, NewJob(1, f"j{n}", "demo.noop", {}, None, 0, None, None, None), 0)
            for n in range(5)
        ]
        done, deleted, with_history, waiting, recent = ids
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'SUCCEEDED', updated_at = 100 WHERE id IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": [done, with_history]},
        )
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'CANCELLED', deleted_at = 100, updated_at = 100 "
                "WHERE id = :j"
            ),
            {"j": deleted},
        )
        conn.execute(
            sa.text("UPDATE jobs SET status = 'FAILED', updated_at = 5000 WHERE id = :j"),
            {"j": recent},
        )
        insert_executions(conn, [NewExecution("kept", with_history, 1, 9_000, 9_000)], 9_000)
    register_worker(engine, "gone", now_ms=100, state=WorkerState.FORGOTTEN)
    register_worker(engine, "quiet", now_ms=100)
    EXECUTIONS_DISPATCHED.labels(worker_id="gone").inc()
    prune(engine, MySqlWorkerTransactions(engine), cast(ClusterClock, FixedClock(2_000)), 1_000)
    with engine.connect() as conn:
        left = set(conn.execute(sa.text("SELECT id FROM jobs")).scalars())
        workers = set(conn.execute(sa.text("SELECT worker_id FROM workers")).scalars())
    assert left == {with_history, waiting, recent}
    assert workers == {"quiet"}
    labelled = {
        s.labels.get("worker_id") for f in EXECUTIONS_DISPATCHED.collect() for s in f.samples
    }
    assert "gone" not in labelled


def test_batches_grow_when_quick_and_shrink_when_slow() -> None:
    size = BatchSize()
    size.adapt(full=True, took_s=0.001)
    assert size.rows == 2 * FIRST_BATCH
    size.adapt(full=False, took_s=0.001)
    assert size.rows == 2 * FIRST_BATCH
    size.adapt(full=True, took_s=1.0)
    assert size.rows == FIRST_BATCH


def test_the_leaders_retention_thread_works_a_backlog_off_back_to_back(
    engine: Engine, redis_client: redis.Redis
) -> None:
    old_finished_executions(engine, 20_000)
    workers = MySqlWorkerTransactions(engine)
    loop = RetentionLoop(engine, workers, cast(ClusterClock, FixedClock(10_000)), 1_000)
    leading = threading.Event()
    leading.set()
    loop.start(leading.is_set)
    try:
        deadline = time.monotonic() + 60
        while count(engine, "executions") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        leading.clear()
        loop.join()
    assert count(engine, "executions") == 0
