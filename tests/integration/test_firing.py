"""Firing SCHEDULED executions on real MySQL and RabbitMQ."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db import executions, executions_with_job, job_control
from common.db.engine import make_engine
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import JobPolicies, NewJob, insert_job
from common.db.workers import MySqlWorkerTransactions
from common.keys import RedisKeys
from common.loadbalance import WorkerChooser
from common.schedule import MisfirePolicy, OverlapPolicy
from common.stores import Stores
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.routing.dispatch import Assignment, dispatch, pack_dispatches
from services.dispatcher.routing.route import Router
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.trigger.fire import WARM_UP_MS, Firer, FireSettings
from tests.books import Expectation, assert_books
from tests.integration.helpers import make_app, register_worker


def firer(
    engine: Engine,
    client: redis.Redis,
    connection: BlockingConnection,
    fire_batch_size: int = 500,
    batch_size: int = 500,
) -> Firer:
    clock = ClusterClock(client)
    register_worker(engine, "w1", now_ms=clock.now_ms())
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, "w1")
    channel.basic_consume("kairos.worker.w1", lambda *args: None)  # w1 looks alive
    directory = WorkerDirectory(MySqlWorkerTransactions(engine), connection, clock, 60_000)
    publisher = BatchPublisher(connection.channel())
    stores = Stores(StoreSettings(), engine, client, RedisKeys("unused"), clock)
    settings = FireSettings(1_000, batch_size, fire_batch_size)
    return Firer.on_stores(stores, publisher, Router(directory, WorkerChooser()), settings)


def scheduled(engine: Engine, job_id: int, execution_id: str, at: int, attempt: int = 1) -> None:
    with engine.begin() as conn:
        insert_executions(conn, [NewExecution(execution_id, job_id, attempt, at, at)], at)


def statuses(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT execution_id, status FROM executions")).all()
    return {str(r[0]): str(r[1]) for r in rows}


def new_job(engine: Engine) -> int:
    with engine.begin() as conn:
        return insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)


def test_due_execution_is_published_and_queued(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    scheduled(engine, new_job(engine), "e-now", now - 5)
    scheduled(engine, new_job(engine), "e-later", now + 60_000)
    assert fire.load() == 1
    assert fire.fire_due() == 1
    assert statuses(engine) == {"e-now": "QUEUED", "e-later": "SCHEDULED"}


def test_everything_due_leaves_in_one_fire_up_to_the_fire_batch_size(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    fire = firer(engine, redis_client, connection, fire_batch_size=3)
    now = ClusterClock(redis_client).now_ms()
    for n in range(4):
        scheduled(engine, new_job(engine), f"e{n}", now - 5)
    assert fire.load() == 4
    assert fire.fire_due() == 3
    assert fire.fire_due() == 1
    assert set(statuses(engine).values()) == {"QUEUED"}


def test_the_loop_wakes_early_to_refresh_the_worker_view_before_a_due_time(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    scheduled(engine, new_job(engine), "e-soon", now + 900)
    fire.load()
    due = fire.next_due()
    assert due is not None
    assert fire.next_wake() == due - WARM_UP_MS


def test_retry_of_a_cancelled_job_is_cancelled_not_sent(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    job_id = new_job(engine)
    scheduled(engine, job_id, "e-first", now - 5)
    scheduled(engine, job_id, "e-retry", now - 5, attempt=2)
    with engine.begin() as conn:
        # The retry of a first attempt that failed, on a job that allows one.
        conn.execute(sa.text("UPDATE executions SET status = 'FAILED' WHERE attempt = 1"))
        conn.execute(
            sa.text("UPDATE jobs SET status = 'CANCELLED', max_retries = 1 WHERE id = :j"),
            {"j": job_id},
        )
    fire.load()
    assert fire.fire_due() == 0
    assert statuses(engine) == {"e-first": "FAILED", "e-retry": "CANCELLED"}
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, {"FAILED", "CANCELLED"}), timeout=0)
    frame = connection.channel().queue_declare("kairos.worker.w1", passive=True)
    assert frame.method.message_count == 0


def test_an_execution_the_broker_cannot_route_stays_scheduled_and_unassigned(
    engine: Engine, connection: BlockingConnection
) -> None:
    make_app(engine)
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, "w1")
    for name in ("e-routed", "e-lost"):
        scheduled(engine, new_job(engine), name, 1_000)
    with engine.connect() as conn:
        rows = executions_with_job.scheduled_until(conn, 2_000, 10)
    targets = {"e-routed": "w1", "e-lost": "nobody"}
    assignments = [Assignment.of(r, targets[r.execution_id]) for r in rows]
    with engine.connect() as conn:
        apps = {int(x) for x in conn.execute(sa.text("SELECT app_pk FROM jobs")).scalars()}
    assert {a.app_pk for a in assignments} == apps  # sent on for the run-log quota
    with engine.begin() as conn:
        executions.lock_still_scheduled(conn, [int(r.id) for r in rows])
        executions.mark_queued(conn, {a.execution_key: a.worker_id for a in assignments}, 1_500)
        publisher = BatchPublisher(connection.channel())
        returned = dispatch(conn, publisher, pack_dispatches(assignments, 1_500))
    assert returned == {"e-lost"}
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT execution_id, status, worker_id, dispatched_at FROM executions")
        ).all()
    assert {tuple(r) for r in found} == {
        ("e-routed", "QUEUED", "w1", 1_500),
        ("e-lost", "SCHEDULED", None, None),
    }


def test_worker_view_is_refreshed_when_it_would_go_stale_within_fresh_for(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    clock = ClusterClock(redis_client)
    channel = connection.channel()
    declare_core(channel)
    directory = WorkerDirectory(
        MySqlWorkerTransactions(engine), connection, clock, 60_000, ttl=30.0
    )
    for worker_id in ("w1", "w2"):
        declare_worker_queue(channel, worker_id)
        channel.basic_consume(f"kairos.worker.{worker_id}", lambda *args: None)
    register_worker(engine, "w1", now_ms=clock.now_ms())
    assert [w.worker_id for w in directory.live()] == ["w1"]
    register_worker(engine, "w2", now_ms=clock.now_ms())
    assert [w.worker_id for w in directory.live()] == ["w1"]
    assert sorted(w.worker_id for w in directory.live(fresh_for=31.0)) == ["w1", "w2"]


def job_with(engine: Engine, handler: str = "demo.noop", **policies: object) -> int:
    job = NewJob(1, "j", handler, {}, None, 0, None, None, None, JobPolicies(**policies))  # type: ignore[arg-type]
    with engine.begin() as conn:
        return insert_job(conn, job, 0)


def job_status(engine: Engine, job_id: int) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(sa.text("SELECT status FROM jobs WHERE id = :j"), {"j": job_id}).scalar()
        )


def test_executions_no_worker_can_take_are_held_and_do_not_starve_the_rest(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    fire = firer(engine, redis_client, connection, batch_size=50)
    now = ClusterClock(redis_client).now_ms()
    for n in range(120):  # more than a load: they come first, soonest due
        scheduled(engine, job_with(engine, handler="nobody.runs"), f"x{n}", now - 1_000 + n)
    scheduled(engine, new_job(engine), "e-ok", now - 5)
    for _ in range(5):  # the dispatch loop's passes
        fire.load()
        while fire.fire_due():
            pass
    found = statuses(engine)
    assert found["e-ok"] == "QUEUED"
    assert {s for e, s in found.items() if e != "e-ok"} == {"SCHEDULED"}
    with engine.connect() as conn:
        held = conn.execute(
            sa.text("SELECT scheduled_at, message FROM executions WHERE execution_id = 'x0'")
        ).one()
    assert held.scheduled_at > now
    assert held.message == "waiting: no live worker runs handler 'nobody.runs'"


def test_a_skip_at_fire_time_releases_the_job_as_a_finished_run_would(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    late = now - 120_000
    one_shot = job_with(engine, misfire_policy=MisfirePolicy.SKIP)
    queued = job_with(engine, overlap_policy=OverlapPolicy.QUEUE, misfire_policy=MisfirePolicy.SKIP)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'RUNNING'"))
        conn.execute(
            sa.text("UPDATE jobs SET cron_expr = '* * * * *' WHERE id = :j"), {"j": queued}
        )
    scheduled(engine, one_shot, "e-one-shot", late)
    scheduled(engine, queued, "e-queue", late)
    fire.load()
    assert fire.fire_due() == 0
    assert statuses(engine) == {"e-one-shot": "SKIPPED", "e-queue": "SKIPPED"}
    assert job_status(engine, one_shot) == "FAILED"
    assert job_status(engine, queued) == "WAITING"
    assert_books(
        engine,
        Expectation([one_shot], {"FAILED"}, {"SKIPPED"}),
        Expectation([queued], {"WAITING"}, {"SKIPPED"}),
        timeout=0,
    )


def test_a_held_execution_is_sent_once_a_worker_runs_its_handler_and_its_message_clears(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    scheduled(engine, job_with(engine, handler="late.handler"), "e-late", now - 5)
    fire.load()
    fire.fire_due()
    register_worker(engine, "w1", now_ms=now, handlers=("demo.noop", "late.handler"))
    with engine.begin() as conn:  # as if the hold were over
        conn.execute(sa.text("UPDATE executions SET scheduled_at = :t"), {"t": now - 1})
    fire._router.directory.live(fresh_for=3600)
    fire.load()
    assert fire.fire_due() == 1
    with engine.connect() as conn:
        sent = conn.execute(sa.text("SELECT status, message FROM executions")).one()
    assert tuple(sent) == ("QUEUED", None)


@contextmanager
def short_lock_waits(engine: Engine) -> Iterator[None]:
    """The engine's connections give up a lock wait after 1 s (MySQL's default: 50 s),
    so a firer that would wait shows it by failing."""

    def shorten(dbapi_connection: Any, *_: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")

    sa.event.listen(engine, "checkout", shorten)
    try:
        yield
    finally:
        sa.event.remove(engine, "checkout", shorten)


def test_a_skip_at_fire_time_waits_for_no_lock_a_claim_may_hold(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    """A FORBID cron's trigger skipped while its last run goes: no claim holds that job,
    so there is nothing to release. A claim still open holds the job's row (it claimed
    the next trigger) until the dispatch loop sends it: the dispatch loop, firing, must
    not wait for that row, or both wait until MySQL gives up (50 s), again and again."""
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    job = job_with(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET cron_expr = '* * * * * *', next_trigger_time = :t"),
            {"t": now + 1_000},
        )
    scheduled(engine, job, "e-going", now - 2_000)
    with engine.begin() as conn:
        executions.mark_queued(
            conn, dict.fromkeys(executions.primary_keys(conn, ["e-going"]), "w1"), now
        )
    scheduled(engine, job, "e-skipped", now - 1_000)
    fire.load()

    with short_lock_waits(engine), engine.connect() as claim, claim.begin():
        # An open claim of the job's next trigger.
        claim.execute(sa.text("SELECT id FROM jobs WHERE id = :j FOR UPDATE"), {"j": job})
        assert fire.fire_due() == 0
    assert statuses(engine)["e-skipped"] == "SKIPPED"
    assert job_status(engine, job) == "WAITING"


def test_firing_passes_over_an_execution_another_transaction_holds(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    """A cancel locks the job's SCHEDULED executions, then its row, which an open claim of
    its next trigger may hold until the dispatch loop sends it: a firer waiting for that
    execution would close the circle, and all three would wait until MySQL gives up."""
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    job = job_with(engine)
    scheduled(engine, job, "e-due", now - 5)
    other = new_job(engine)
    scheduled(engine, other, "e-free", now - 5)
    fire.load()
    api = make_engine(namespace, pool_size=1)
    with engine.connect() as claim, claim.begin():
        claim.execute(sa.text("SELECT id FROM jobs WHERE id = :j FOR UPDATE"), {"j": job})

        def cancel() -> None:
            with api.begin() as conn:
                job_control.cancel_job(conn, 1, job, job_control.ACTIVE, now)

        cancelling = threading.Thread(target=cancel)
        cancelling.start()
        wait_for_the_cancel_to_wait(engine)  # it holds e-due and waits for the job row
        with short_lock_waits(engine):
            assert fire.fire_due() == 1
        assert statuses(engine)["e-free"] == "QUEUED"
    cancelling.join(timeout=60)
    api.dispose()
    assert statuses(engine)["e-due"] == "CANCELLED"


def wait_for_the_cancel_to_wait(engine: Engine) -> None:
    """Return once the cancel's job UPDATE runs (its executions are locked by then)."""
    for _ in range(600):
        with engine.connect() as conn:
            waiting = conn.execute(
                sa.text(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                    "WHERE DB = DATABASE() AND INFO LIKE :q"
                ),
                {"q": "UPDATE jobs SET status=%CANCELLED%"},
            ).scalar_one()
        if waiting:
            return
        time.sleep(0.05)
    raise AssertionError("the cancel never reached the job row")


def test_runs_waiting_for_slots_survive_their_leader_and_are_no_misfire(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    """A worker of capacity 4 takes 8 (4 running, 4 starting soon); the rest wait in
    MySQL, marked. A new leader, ten minutes later, sends them as slots free: none lost,
    none skipped as late."""
    make_app(engine)
    fire = firer(engine, redis_client, connection)
    now = ClusterClock(redis_client).now_ms()
    # One run each (FORBID sends one per job); a late trigger of theirs is skipped.
    jobs = [job_with(engine, misfire_policy=MisfirePolicy.SKIP) for _ in range(20)]
    with engine.begin() as conn:
        runs = [NewExecution(f"e{n:02}", job, 1, now - 5, now - 5) for n, job in enumerate(jobs)]
        insert_executions(conn, runs, now)
    fire.load()
    assert fire.fire_due() == 8
    assert fire.waiting() == 12
    with engine.connect() as conn:
        marked = conn.execute(
            sa.text("SELECT COUNT(*) FROM executions WHERE message = :m"),
            {"m": executions_with_job.SLOT_WAIT},
        ).scalar()
    assert marked == 12
    with engine.begin() as conn:  # ten minutes on, the first eight done
        conn.execute(sa.text("UPDATE executions SET trigger_time = trigger_time - 600000"))
        conn.execute(
            sa.text(
                "UPDATE executions SET status = 'SUCCEEDED', ended_at = 1 WHERE status = 'QUEUED'"
            )
        )
    standby = firer(engine, redis_client, connection)
    sent: list[int] = []
    deadline = time.monotonic() + 30
    while sum(sent) < 12 and time.monotonic() < deadline:
        standby.load()
        sent.append(standby.fire_due())
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE executions SET status = 'SUCCEEDED', ended_at = 1 "
                    "WHERE status = 'QUEUED'"
                )
            )
        time.sleep(0.1)  # the worker view is read again once it shows a worker full
    assert sum(sent) == 12 and max(sent) == 8
    assert set(statuses(engine).values()) == {"SUCCEEDED"}
