"""Recording results while the dispatcher marks the same executions QUEUED never fails.

A no-op result can come back before the dispatcher has marked its execution QUEUED; the
two transactions then touch the same rows at the same moment.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import redis
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.jobs import NewJob, insert_job
from common.db.retry import retry_conflicts
from common.messages import ExecutionResult
from common.states import ExecutionStatus
from services.dispatcher.outcomes.recording import record_results
from tests.integration.helpers import make_app

ROUNDS = 30
BATCH = 60


def pending_batch(engine: Engine, round_: int) -> list[str]:
    ids = [f"r{round_}-{i}" for i in range(BATCH)]
    with engine.begin() as conn:
        job_id = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        insert_executions(
            conn, [NewExecution(e, job_id, i + 1, 0, 0) for i, e in enumerate(ids)], 0
        )
    return ids


def keys_of(engine: Engine, execution_ids: list[str]) -> list[int]:
    with engine.connect() as conn:
        return primary_keys(conn, execution_ids)


def finished(execution_id: str) -> ExecutionResult:
    return ExecutionResult(
        execution_id=execution_id,
        job_id=1,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=1,
        ended_at=2,
    )


@retry_conflicts("fire")
def record_queued(engine: Engine, workers: Mapping[int, str], now_ms: int) -> None:
    """Mark executions QUEUED in a transaction of their own, as the firer's mark does."""
    with engine.begin() as conn:
        mark_queued(conn, workers, now_ms)


def test_concurrent_mark_queued_and_record_results_both_complete(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    clock = ClusterClock(redis_client)
    errors: list[BaseException] = []
    for round_ in range(ROUNDS):
        ids = pending_batch(engine, round_)
        barrier = threading.Barrier(2)

        def queue_them(ids: list[str] = ids, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                record_queued(engine, dict.fromkeys(keys_of(engine, ids), "w1"), 5)
            except BaseException as e:
                errors.append(e)

        def finish_them(ids: list[str] = ids, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                record_results(engine, clock, [finished(e) for e in reversed(ids)])
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=queue_them), threading.Thread(target=finish_them)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []


def test_mark_queued_stamps_only_pending_executions(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    ids = pending_batch(engine, 0)
    record_results(engine, ClusterClock(redis_client), [finished(ids[0])])
    record_queued(engine, dict.fromkeys(keys_of(engine, ids[:2]), "w1"), 77)
    with engine.connect() as conn:
        rows: dict[str, str] = dict(
            conn.exec_driver_sql(
                "SELECT execution_id, CONCAT(status, ':', COALESCE(dispatched_at, '-')) "
                "FROM executions WHERE execution_id IN (%s, %s)",
                (ids[0], ids[1]),
            ).all()
        )
    assert rows == {ids[0]: "SUCCEEDED:-", ids[1]: "QUEUED:77"}
