"""MySQL as the last check before a run: late starts and redeliveries after Redis lost
its data, on real MySQL and Redis."""

from __future__ import annotations

from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.jobs import JobPolicies, NewJob, insert_job
from common.keys import RedisKeys
from common.messages import DispatchMessage
from services.worker.registry import HandlerContext
from services.worker.runner import ExecutionRunner
from services.worker.start_guard import MySQLRows
from tests.integration.helpers import make_app

CALLS: list[str] = []


def counting(params: dict[str, Any], ctx: HandlerContext) -> None:
    CALLS.append(ctx.execution_id)


def make_runner(engine: Engine, client: redis.Redis, namespace: StoreSettings) -> ExecutionRunner:
    keys = RedisKeys(namespace.namespace)
    handlers = {"test.count": counting}
    return ExecutionRunner(
        "w1", handlers, client, keys, ClusterClock(client), 60, rows=MySQLRows(engine)
    )


def queued(engine: Engine, execution_id: str, timeout: int | None, status: str = "QUEUED") -> int:
    make_app(engine)
    with engine.begin() as conn:
        policies = JobPolicies(timeout_seconds=timeout)
        job_id = insert_job(
            conn, NewJob(1, execution_id, "test.count", {}, None, 0, None, None, None, policies), 0
        )
        insert_executions(conn, [NewExecution(execution_id, job_id, 1, 0, 0)], 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, [execution_id]), "w1"), 0)
        conn.execute(
            sa.text("UPDATE executions SET status = :s WHERE execution_id = :e"),
            {"s": status, "e": execution_id},
        )
    return job_id


def message(execution_id: str, dispatched_at: int, timeout: int | None = None) -> DispatchMessage:
    return DispatchMessage(
        execution_id=execution_id,
        job_id=1,
        attempt=1,
        trigger_time=0,
        handler="test.count",
        params={},
        dispatched_at=dispatched_at,
        timeout_seconds=timeout,
    )


def lose_redis_data(client: redis.Redis, namespace: StoreSettings) -> None:
    """What a flush does to this namespace's keys (the server is shared: no FLUSHALL)."""
    for key in client.scan_iter(f"{namespace.namespace}:*"):
        client.delete(key)


def now_ms(client: redis.Redis) -> int:
    return ClusterClock(client).now_ms()


def test_a_late_copy_of_an_execution_the_leader_timed_out_is_not_run(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    queued(engine, "e-late", timeout=1, status="TIMED_OUT")
    runner = make_runner(engine, redis_client, namespace)
    late = message("e-late", dispatched_at=now_ms(redis_client) - 5_000, timeout=1)
    assert runner.run(late) is None
    assert CALLS == []


def test_a_late_start_whose_row_is_still_queued_runs(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    queued(engine, "e-late", timeout=1)
    runner = make_runner(engine, redis_client, namespace)
    late = message("e-late", dispatched_at=now_ms(redis_client) - 5_000, timeout=1)
    result = runner.run(late)
    assert result is not None and result.status == "SUCCEEDED"
    assert CALLS == ["e-late"]


def test_a_copy_redelivered_after_redis_lost_its_data_is_lost_not_run_again(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    queued(engine, "e-1", timeout=None)
    sent = message("e-1", dispatched_at=now_ms(redis_client))
    first = make_runner(engine, redis_client, namespace)
    first.admit([sent])  # taken; the process dies before it reports
    lose_redis_data(redis_client, namespace)
    again = make_runner(engine, redis_client, namespace)
    again.note_redelivered([sent])
    result = again.run(sent)
    assert result is not None and result.status == "LOST"
    assert CALLS == []


def test_a_redelivered_copy_whose_row_ended_is_dropped(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    queued(engine, "e-1", timeout=None, status="SUCCEEDED")
    sent = message("e-1", dispatched_at=now_ms(redis_client))
    lose_redis_data(redis_client, namespace)
    runner = make_runner(engine, redis_client, namespace)
    runner.note_redelivered([sent])
    assert runner.run(sent) is None
    assert CALLS == []


def test_a_redelivered_copy_sent_after_the_loss_and_never_started_runs(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    queued(engine, "e-1", timeout=None)
    runner = make_runner(engine, redis_client, namespace)
    runner.admit([message("e-0", dispatched_at=0)])  # sets the epoch
    sent = message("e-1", dispatched_at=now_ms(redis_client) + 5_000)
    runner.note_redelivered([sent])
    result = runner.run(sent)
    assert result is not None and result.status == "SUCCEEDED"
    assert CALLS == ["e-1"]


def test_a_first_delivery_sent_before_the_loss_runs(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    CALLS.clear()
    queued(engine, "e-1", timeout=None)
    sent = message("e-1", dispatched_at=now_ms(redis_client) - 60_000)
    lose_redis_data(redis_client, namespace)
    result = make_runner(engine, redis_client, namespace).run(sent)
    assert result is not None and result.status == "SUCCEEDED"
    assert CALLS == ["e-1"]


def test_a_failed_row_read_gives_the_keys_back(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    class Down:
        def statuses(self, execution_ids: object) -> dict[str, Any]:
            raise sa.exc.OperationalError("SELECT", {}, Exception("gone"))

    keys = RedisKeys(namespace.namespace)
    runner = ExecutionRunner(
        "w1",
        {"test.count": counting},
        redis_client,
        keys,
        ClusterClock(redis_client),
        60,
        rows=Down(),
    )
    sent = message("e-1", dispatched_at=0)
    runner.note_redelivered([sent])
    try:
        runner.admit([sent])
    except sa.exc.OperationalError:
        pass
    else:
        raise AssertionError("the row read's error should go up")
    assert redis_client.get(keys.execution_started("e-1")) is None
