"""The books themselves on real MySQL: each discrepancy they exist to find is found, and
a scenario that adds up has none."""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.states import ExecutionStatus
from tests.books import Expectation, read_books
from tests.integration.helpers import make_app
from tests.witnesses import Effect, Witnesses, count_arrivals

HOOK = "http://127.0.0.1:9/hook"
FINAL = {"SUCCEEDED", "FAILED"}


def job(
    engine: Engine,
    status: str,
    cron: str | None = None,
    callback: str | None = None,
    retries: int = 0,
) -> int:
    with engine.begin() as conn:
        job_id = insert_job(conn, NewJob(1, "j", "demo.noop", {}, cron, 0, callback, None, None), 0)
        conn.execute(
            sa.text("UPDATE jobs SET status = :s, max_retries = :r WHERE id = :j"),
            {"s": status, "r": retries, "j": job_id},
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


def callback(
    engine: Engine,
    job_id: int,
    execution_id: str,
    status: str,
    code: int | None,
    attempts: int = 1,
) -> str:
    delivery_id = f"msg_{execution_id}"
    delivery = NewDelivery(delivery_id, execution_id, job_id, 1, HOOK, "{}")
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).insert_deliveries([delivery], 0)
        conn.execute(
            sa.text(
                "UPDATE callback_deliveries SET status = :s, last_status_code = :c, "
                "attempts = :a WHERE delivery_id = :d"
            ),
            {"s": status, "c": code, "a": attempts, "d": delivery_id},
        )
    return delivery_id


def problems(engine: Engine, *expected: Expectation) -> list[str]:
    return read_books(engine, *expected).problems


def test_jobs_that_add_up_have_no_problem(engine: Engine) -> None:
    make_app(engine)
    done = job(engine, "SUCCEEDED", callback=HOOK)
    callback(engine, done, run(engine, done, ExecutionStatus.SUCCEEDED), "DELIVERED", 200)
    retried = job(engine, "SUCCEEDED", retries=1)
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
    twice = job(engine, "SUCCEEDED", retries=1)
    run(engine, twice, ExecutionStatus.SUCCEEDED, attempt=1)
    run(engine, twice, ExecutionStatus.SUCCEEDED, attempt=2)
    assert problems(engine, Expectation([twice])) == [
        f"job {twice}: trigger 1000 succeeded 2 times",
        f"job {twice}: trigger 1000: attempt 1 SUCCEEDED, and yet retried",
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


def test_a_cron_trigger_that_ended_with_no_callback_is_found_whatever_later_triggers_did(
    engine: Engine,
) -> None:
    make_app(engine)
    cron = job(engine, "CANCELLED", cron="* * * * * *", callback=HOOK, retries=1)
    silent = run(engine, cron, ExecutionStatus.SUCCEEDED, trigger=1_000)
    first = run(engine, cron, ExecutionStatus.FAILED, trigger=2_000)
    callback(engine, cron, first, "DELIVERED", 200)
    second = run(engine, cron, ExecutionStatus.SUCCEEDED, attempt=2, trigger=2_000)
    callback(engine, cron, second, "DELIVERED", 200)
    assert problems(engine, Expectation([cron], {"CANCELLED"})) == [
        f"job {cron}: execution {silent} ended with no callback"
    ]


def test_a_failed_one_shot_job_with_no_execution_is_a_problem(engine: Engine) -> None:
    make_app(engine)
    failed = job(engine, "FAILED")
    assert problems(engine, Expectation([failed], {"FAILED"})) == [
        f"job {failed}: FAILED with no execution of its trigger"
    ]
    explained = job(engine, "FAILED")
    run(engine, explained, ExecutionStatus.FAILED)
    assert problems(engine, Expectation([explained], {"FAILED"})) == []


def test_an_unfinished_row_with_no_send_time_is_as_late_as_its_trigger(engine: Engine) -> None:
    make_app(engine)
    cron = job(engine, "RUNNING", cron="* * * * * *")
    stuck = run(engine, cron, ExecutionStatus.SCHEDULED, trigger=1_000)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE executions SET scheduled_at = NULL"))
    assert problems(engine, Expectation([cron], {"RUNNING"}, in_flight_ms=60_000)) == [
        f"job {cron}: execution {stuck} still SCHEDULED"
    ]


def test_a_retried_callback_is_a_problem_where_the_receiver_takes_each_at_once(
    engine: Engine,
) -> None:
    make_app(engine)
    done = job(engine, "SUCCEEDED", callback=HOOK)
    execution_id = run(engine, done, ExecutionStatus.SUCCEEDED)
    callback(engine, done, execution_id, "DELIVERED", 200, attempts=3)
    assert problems(engine, Expectation([done])) == []
    assert problems(engine, Expectation([done], callback_attempts=1)) == [
        f"job {done}: callback of {execution_id} took 3 POSTs, expected at most 1"
    ]


def test_attempts_run_from_one_without_gaps_within_the_jobs_retries(engine: Engine) -> None:
    make_app(engine)
    gap = job(engine, "SUCCEEDED", retries=5)
    run(engine, gap, ExecutionStatus.LOST, attempt=1)
    run(engine, gap, ExecutionStatus.SUCCEEDED, attempt=3)
    over = job(engine, "SUCCEEDED", retries=1)
    for attempt in (1, 2):
        run(engine, over, ExecutionStatus.FAILED, attempt=attempt)
    run(engine, over, ExecutionStatus.SUCCEEDED, attempt=3)
    assert problems(engine, Expectation([gap, over], execution_statuses=FINAL | {"LOST"})) == [
        f"job {gap}: trigger 1000 has attempts [1, 3], expected 1 to 2",
        f"job {over}: trigger 1000 has 3 attempts, its job allows 1 retries",
    ]


def test_a_trigger_missing_from_a_cron_schedule_is_a_problem_when_the_whole_is_expected(
    engine: Engine,
) -> None:
    make_app(engine)
    cron = job(engine, "CANCELLED", cron="* * * * * *")
    for trigger in (1_000, 2_000, 4_000):
        run(engine, cron, ExecutionStatus.SUCCEEDED, trigger=trigger)
    assert problems(engine, Expectation([cron], {"CANCELLED"})) == []
    assert problems(engine, Expectation([cron], {"CANCELLED"}, whole_schedule=True)) == [
        f"job {cron}: trigger 2000 is followed by 4000, its schedule says 3000"
    ]


def test_the_ledger_must_hold_one_side_effect_per_succeeded_trigger_and_execution(
    engine: Engine,
) -> None:
    make_app(engine)
    done = job(engine, "SUCCEEDED", retries=1)
    lost = run(engine, done, ExecutionStatus.LOST)
    succeeded = run(engine, done, ExecutionStatus.SUCCEEDED, attempt=2)
    expected = Expectation([done], execution_statuses=FINAL | {"LOST"})
    one = Effect(done, 1_000, succeeded)
    assert read_books(engine, expected, witnesses=Witnesses(effects=[one])).problems == []
    assert read_books(engine, expected, witnesses=Witnesses(effects=[])).problems == [
        f"job {done}: execution {succeeded} SUCCEEDED, but no side effect of it is in the ledger",
        f"job {done}: trigger 1000 did its side effect 0 times, expected 1 "
        "(and one more for each of its 1 LOST runs)",
    ]
    # The lost run did its work before its worker died, and its retry did it again:
    # README's "What a handler must do"; a third time is one too many.
    twice = [Effect(done, 1_000, lost), one]
    assert read_books(engine, expected, witnesses=Witnesses(effects=twice)).problems == []
    thrice = [Effect(done, 1_000, lost), one, Effect(done, 1_000, lost)]
    problems = read_books(engine, expected, witnesses=Witnesses(effects=thrice)).problems
    assert f"job {done}: trigger 1000 did its side effect 3 times, expected 1 " in problems[-1]
    stranger = [one, Effect(done, 1_000, "no-such-run")]
    assert read_books(engine, expected, witnesses=Witnesses(effects=stranger)).problems == [
        f"job {done}: side effect of execution no-such-run, which the database does not hold"
    ]


def test_every_delivered_callback_must_have_reached_its_receiver_as_often_as_recorded(
    engine: Engine,
) -> None:
    make_app(engine)
    done = job(engine, "SUCCEEDED", callback=HOOK)
    execution_id = run(engine, done, ExecutionStatus.SUCCEEDED)
    delivery_id = callback(engine, done, execution_id, "DELIVERED", 200)
    expected = Expectation([done])

    def seen(*ids: str, extra_posts: int = 0) -> Witnesses:
        arrivals = count_arrivals({"Webhook-Id": i} for i in ids)
        return Witnesses(arrivals=arrivals, extra_posts=extra_posts)

    books = read_books(engine, expected, witnesses=seen(delivery_id))
    assert (books.problems, books.callback_copies) == ([], 0)
    assert read_books(engine, expected, witnesses=seen()).problems == [
        f"job {done}: callback of {execution_id} DELIVERED, "
        f"but its receiver never got webhook-id {delivery_id}"
    ]
    assert read_books(engine, expected, witnesses=seen(delivery_id, delivery_id)).problems == [
        f"job {done}: callback of {execution_id} reached its receiver 2 times, "
        "with 1 POSTs recorded (and 0 allowed unrecorded)"
    ]
    copied = read_books(engine, expected, witnesses=seen(delivery_id, delivery_id, extra_posts=1))
    assert (copied.problems, copied.callback_copies) == ([], 1)
    assert read_books(engine, expected, witnesses=seen(delivery_id, "msg_x")).problems == [
        "1 callbacks arrived as webhook-id 'msg_x', of no delivery"
    ]
