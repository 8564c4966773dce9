"""Recording results on real MySQL: exactly once, retries, job state, callbacks."""

from __future__ import annotations

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.due_jobs import claim_jobs, find_due_jobs
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import JobPolicies, NewJob, get_job, insert_job
from common.messages import ExecutionResult
from common.schedule import plan_trigger
from services.dispatcher.outcomes.recording import record_results
from services.dispatcher.trigger.claim import claim_update
from tests.books import Expectation, assert_books
from tests.integration.helpers import make_app


def running_job(
    engine: Engine,
    cron: str | None = None,
    callback: str | None = None,
    policies: JobPolicies | None = None,
) -> str:
    """A claimed job with one SCHEDULED execution; returns the execution id."""
    make_app(engine)
    job = NewJob(
        1, "j", "demo.noop", {}, cron, 1_000, callback, None, None, policies or JobPolicies()
    )
    with engine.begin() as conn:
        job_id = insert_job(conn, job, 0)
        due = find_due_jobs(conn, 2_000, {"demo.noop"}, 10)
        plan = plan_trigger(due[0].policy, 1_000, 1_500)
        claim_jobs(conn, due, {job_id: claim_update(plan)}, 1_500)
        insert_executions(conn, [NewExecution("e-1", job_id, 1, 1_000, 1_500)], 1_500)
    return "e-1"


def result(status: str = "SUCCEEDED", execution_id: str = "e-1") -> ExecutionResult:
    return ExecutionResult.model_validate(
        {
            "execution_id": execution_id,
            "job_id": 1,
            "worker_id": "w1",
            "status": status,
            "message": None if status == "SUCCEEDED" else "boom",
            "started_at": 2_100,
            "ended_at": 2_200,
        }
    )


def executions(engine: Engine) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT attempt, status FROM executions ORDER BY attempt"))
        return [(int(r[0]), str(r[1])) for r in rows]


def test_one_shot_job_ends_with_its_execution(engine: Engine, redis_client: redis.Redis) -> None:
    running_job(engine)
    record_results(engine, ClusterClock(redis_client), [result("FAILED")])
    with engine.connect() as conn:
        job = get_job(conn, 1, 1)
        execution = conn.execute(sa.text("SELECT status, message FROM executions")).one()
    assert job is not None
    assert job.status == "FAILED"
    assert tuple(execution) == ("FAILED", "boom")
    assert_books(engine, Expectation([1], {"FAILED"}, {"FAILED"}), timeout=0)


def test_a_result_seen_twice_is_recorded_once(engine: Engine, redis_client: redis.Redis) -> None:
    running_job(engine, callback="http://127.0.0.1:9/hook")
    clock = ClusterClock(redis_client)
    first = record_results(engine, clock, [result(), result()])
    second = record_results(engine, clock, [result("FAILED")])
    assert len(first) == 1
    assert second == []
    with engine.connect() as conn:
        deliveries = conn.execute(sa.text("SELECT COUNT(*) FROM callback_deliveries")).scalar()
    assert executions(engine) == [(1, "SUCCEEDED")]
    assert deliveries == 1
    expected = Expectation([1], execution_statuses={"SUCCEEDED"}, callbacks="recorded")
    assert_books(engine, expected, timeout=0)


def test_failed_attempt_with_retries_left_schedules_a_new_attempt(
    engine: Engine, redis_client: redis.Redis
) -> None:
    running_job(
        engine,
        callback="http://127.0.0.1:9/hook",
        policies=JobPolicies(max_retries=1, retry_backoff_seconds=2),
    )
    clock = ClusterClock(redis_client)
    created = record_results(engine, clock, [result("FAILED")])
    assert created == [], "no callback until the trigger ends"
    assert executions(engine) == [(1, "FAILED"), (2, "SCHEDULED")]
    with engine.connect() as conn:
        job = get_job(conn, 1, 1)
        retry = conn.execute(
            sa.text("SELECT execution_id, scheduled_at FROM executions WHERE attempt = 2")
        ).one()
    assert job is not None
    assert job.status == "RUNNING"
    assert retry.execution_id != "e-1"
    assert clock.now_ms() + 1_000 - 50 <= retry.scheduled_at <= clock.now_ms() + 2_000
    ended = record_results(engine, clock, [result("TIMED_OUT", retry.execution_id)])
    assert len(ended) == 1
    assert executions(engine) == [(1, "FAILED"), (2, "TIMED_OUT")]
    with engine.connect() as conn:
        job = get_job(conn, 1, 1)
    assert job is not None
    assert job.status == "FAILED"
    expected = Expectation([1], {"FAILED"}, {"FAILED", "TIMED_OUT"}, callbacks="recorded")
    assert assert_books(engine, expected, timeout=0).deliveries == 1


def test_a_lowered_app_retry_limit_ends_a_stored_jobs_trigger_sooner(
    engine: Engine, redis_client: redis.Redis
) -> None:
    # The job asked for 100 retries when its app allowed them; the limit is now 1.
    running_job(engine, policies=JobPolicies(max_retries=100, retry_backoff_seconds=0))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE apps SET max_retries = 1"))
    clock = ClusterClock(redis_client)
    record_results(engine, clock, [result("FAILED")])
    assert executions(engine) == [(1, "FAILED"), (2, "SCHEDULED")]
    with engine.connect() as conn:
        retry = conn.execute(sa.text("SELECT execution_id FROM executions WHERE attempt = 2"))
        retry_id = str(retry.scalar_one())
    record_results(engine, clock, [result("FAILED", retry_id)])
    assert executions(engine) == [(1, "FAILED"), (2, "FAILED")]
    assert_books(engine, Expectation([1], {"FAILED"}, {"FAILED"}), timeout=0)


def test_cron_job_keeps_its_next_trigger_and_is_released(
    engine: Engine, redis_client: redis.Redis
) -> None:
    running_job(engine, cron="*/2 * * * * *")
    clock = ClusterClock(redis_client)
    record_results(engine, clock, [result()])
    with engine.connect() as conn:
        job = get_job(conn, 1, 1)
    assert job is not None
    assert job.status == "WAITING"
    assert job.next_trigger_time == 2_000
    assert_books(engine, Expectation([1], {"WAITING"}, {"SUCCEEDED"}), timeout=0)


def test_callback_payload_is_recorded_with_the_result(
    engine: Engine, redis_client: redis.Redis
) -> None:
    running_job(engine, callback="http://127.0.0.1:9/hook")
    created = record_results(engine, ClusterClock(redis_client), [result()])
    assert created[0].url == "http://127.0.0.1:9/hook"
    assert '"executionId":"e-1"' in created[0].payload
    assert '"status":"SUCCEEDED"' in created[0].payload
    expected = Expectation([1], execution_statuses={"SUCCEEDED"}, callbacks="recorded")
    assert_books(engine, expected, timeout=0)


def test_a_cron_job_with_no_trigger_left_ends_with_its_last_run(
    engine: Engine, redis_client: redis.Redis
) -> None:
    running_job(engine, cron="*/2 * * * * *")
    with engine.begin() as conn:
        # As a claim leaves a cron job past its last time: held, with no next trigger.
        conn.execute(sa.text("UPDATE jobs SET next_trigger_time = NULL, status = 'RUNNING'"))
    record_results(engine, ClusterClock(redis_client), [result()])
    with engine.connect() as conn:
        job = get_job(conn, 1, 1)
    assert job is not None
    assert job.status == "SUCCEEDED"
    assert_books(engine, Expectation([1], execution_statuses={"SUCCEEDED"}), timeout=0)
