"""The books themselves on real MySQL: each discrepancy they exist to find is found, and
a scenario that adds up has none."""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.deliveries import NewDelivery, insert_deliveries
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.states import ExecutionStatus
from tests.books import Expectation, read_books
from tests.integration.helpers import make_app

HOOK = "http://127.0.0.1:9/hook"
FINAL = {"SUCCEEDED", "FAILED"}


def job(engine: Engine, status: str, cron: str | None = None, callback: str | None = None) -> int:
    with engine.begin() as conn:
        job_id = insert_job(conn, NewJob(1, "j", "demo.noop", {}, cron, 0, callback, None, None), 0)
        conn.execute(
            sa.text("UPDATE jobs SET status = :s WHERE id = :j"), {"s": status, "j": job_id}
        )
    return job_id


def run(
    engine: Engine,
    job_id: int,
    status: ExecutionStatus,
    attempt: int = 1,
    trigger: int = 1_000,
    manual: bool = False,
    dispatched_ago_ms: int = 0,
) -> str:
    execution_id = f"e-{job_id}-{attempt}-{trigger}"
    dispatched_at = int(time.time() * 1000) - dispatched_ago_ms
    new = NewExecution(execution_id, job_id, attempt, trigger, trigger, status, manual=manual)
    with engine.begin() as conn:
        insert_executions(conn, [new], 0)
        conn.execute(
            sa.text("UPDATE executions SET dispatched_at = :t WHERE execution_id = :e"),
            {"t": dispatched_at, "e": execution_id},
        )
    return execution_id


def callback(engine: Engine, job_id: int, execution_id: str, status: str, code: int | None) -> None:
    delivery = NewDelivery(f"msg_{execution_id}", execution_id, job_id, 1, HOOK, "{}")
    with engine.begin() as conn:
        insert_deliveries(conn, [delivery], 0)
        conn.execute(
            sa.text("UPDATE callback_deliveries SET status = :s, last_status_code = :c"),
            {"s": status, "c": code},
        )


def problems(engine: Engine, *expected: Expectation) -> list[str]:
    return read_books(engine, *expected).problems


def test_jobs_that_add_up_have_no_problem(engine: Engine) -> None:
    make_app(engine)
    done = job(engine, "SUCCEEDED", callback=HOOK)
    callback(engine, done, run(engine, done, ExecutionStatus.SUCCEEDED), "DELIVERED", 200)
    retried = job(engine, "SUCCEEDED")
    run(engine, retried, ExecutionStatus.LOST)
    run(engine, retried, ExecutionStatus.SUCCEEDED, attempt=2)
    books = read_books(
        engine,
        Expectation([done], execution_statuses={"SUCCEEDED"}),
        Expectation([retried], execution_statuses={"LOST", "SUCCEEDED"}),
    )
    assert books.problems == []
    assert (books.executions, books.deliveries) == (3, 1)
    assert books.outcomes == {"SUCCEEDED": 2, "LOST": 1}


def test_an_unfinished_execution_is_a_problem_unless_in_flight_within_the_bound(
    engine: Engine,
) -> None:
    make_app(engine)
    cron = job(engine, "RUNNING", cron="* * * * * *")
    fresh = run(engine, cron, ExecutionStatus.QUEUED, trigger=1_000, dispatched_ago_ms=1_000)
    live = Expectation([cron], {"RUNNING"}, in_flight_ms=60_000)
    assert problems(engine, Expectation([cron], {"RUNNING"})) == [
        f"job {cron}: execution {fresh} still QUEUED"
    ]
    assert problems(engine, live) == []
    stuck = run(engine, cron, ExecutionStatus.QUEUED, trigger=2_000, dispatched_ago_ms=600_000)
    assert problems(engine, live) == [f"job {cron}: execution {stuck} still QUEUED"]


def test_a_one_shot_job_must_end_as_its_trigger_did(engine: Engine) -> None:
    make_app(engine)
    failed_run = job(engine, "SUCCEEDED")
    run(engine, failed_run, ExecutionStatus.FAILED)
    manual_only = job(engine, "SUCCEEDED")
    run(engine, manual_only, ExecutionStatus.SUCCEEDED, manual=True)
    succeeded_run = job(engine, "FAILED")
    run(engine, succeeded_run, ExecutionStatus.SUCCEEDED)
    assert problems(engine, Expectation([failed_run, manual_only, succeeded_run], FINAL)) == [
        f"job {failed_run}: SUCCEEDED, but no run of its trigger succeeded",
        f"job {manual_only}: SUCCEEDED, but no run of its trigger succeeded",
        f"job {succeeded_run}: FAILED, but a run of its trigger succeeded",
    ]


def test_an_outcome_the_scenario_does_not_expect_is_a_problem(engine: Engine) -> None:
    make_app(engine)
    lost = job(engine, "FAILED")
    execution_id = run(engine, lost, ExecutionStatus.LOST)
    assert problems(engine, Expectation([lost], {"FAILED"}, {"FAILED"})) == [
        f"job {lost}: execution {execution_id} LOST, expected ['FAILED']"
    ]
    assert problems(engine, Expectation([lost])) == [f"job {lost}: FAILED, expected ['SUCCEEDED']"]


def test_a_trigger_that_succeeded_twice_is_a_problem(engine: Engine) -> None:
    make_app(engine)
    twice = job(engine, "SUCCEEDED")
    run(engine, twice, ExecutionStatus.SUCCEEDED, attempt=1)
    run(engine, twice, ExecutionStatus.SUCCEEDED, attempt=2)
    assert problems(engine, Expectation([twice])) == [
        f"job {twice}: trigger 1000 succeeded 2 times"
    ]
    cron = job(engine, "CANCELLED", cron="* * * * * *")
    for trigger in (1_000, 2_000, 3_000):  # each trigger's first attempt
        run(engine, cron, ExecutionStatus.SUCCEEDED, trigger=trigger)
    assert problems(engine, Expectation([cron], {"CANCELLED"})) == []


def test_every_callback_must_be_settled_as_the_scenario_expects(engine: Engine) -> None:
    make_app(engine)
    dead = job(engine, "SUCCEEDED", callback=HOOK)
    dead_run = run(engine, dead, ExecutionStatus.SUCCEEDED)
    callback(engine, dead, dead_run, "DEAD", 500)
    assert problems(engine, Expectation([dead], callbacks="dead")) == []
    assert problems(engine, Expectation([dead], callbacks="settled")) == []
    assert problems(engine, Expectation([dead])) == [
        f"job {dead}: callback of {dead_run} DEAD, expected DELIVERED"
    ]
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE callback_deliveries SET last_status_code = NULL"))
    assert problems(engine, Expectation([dead], callbacks="settled")) == [
        f"job {dead}: callback of {dead_run} DEAD with no reason"
    ]
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE callback_deliveries SET status = 'QUEUED'"))
    assert problems(engine, Expectation([dead], callbacks="dead")) == [
        f"job {dead}: callback of {dead_run} still QUEUED"
    ]
    silent = job(engine, "SUCCEEDED", callback=HOOK)
    silent_run = run(engine, silent, ExecutionStatus.SUCCEEDED)
    assert problems(engine, Expectation([silent])) == [
        f"job {silent}: execution {silent_run} ended with no callback"
    ]
