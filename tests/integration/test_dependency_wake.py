"""A parent's run end wakes its children's held runs, on MySQL: a run recorded by the
results path (``outcomes.children``), or skipped or cancelled by the firer
(``trigger.fire_wake``).

Without the wake-up a child held for its parent waits for its hold time (up to 30 s),
however early the parent ends. Two apps' families are recorded in one results batch, as
a busy dispatcher records them, with runs that must keep their later time beside them.
"""

from __future__ import annotations

import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.executions import NewExecution, insert_executions
from common.db.job_dependencies import After, insert_edges
from common.db.jobs import JobPolicies, NewJob, insert_jobs
from common.dependencies import DependOn
from common.messages import ExecutionResult
from common.states import ExecutionStatus
from services.dispatcher.outcomes.recording import record_results
from tests.integration.helpers import make_app
from tests.integration.test_firing import firer, statuses

LATER_MS = 60_000
HELD = "waiting: parent job {parent} run e-{parent} is QUEUED"


def _jobs(engine: Engine, app_pk: int, names: list[str], retries: int = 0) -> list[int]:
    policies = JobPolicies(max_retries=retries)
    new = [
        NewJob(app_pk, n, "demo.noop", {}, None, 1_000, None, None, None, policies) for n in names
    ]
    with engine.begin() as conn:
        return insert_jobs(conn, new, 0)


def _queued(engine: Engine, job_ids: list[int]) -> None:
    runs = [NewExecution(f"e-{j}", j, 1, 1_000, 1_000).queued_on("w1") for j in job_ids]
    with engine.begin() as conn:
        insert_executions(conn, runs, 1_000)


def _scheduled(engine: Engine, job_id: int, at_ms: int, message: str | None, attempt: int) -> str:
    execution_id = f"c-{job_id}-{attempt}"
    with engine.begin() as conn:
        insert_executions(conn, [NewExecution(execution_id, job_id, attempt, 1_000, at_ms)], 1_000)
        conn.execute(
            sa.text("UPDATE executions SET message = :m WHERE execution_id = :e"),
            {"m": message, "e": execution_id},
        )
    return execution_id


def _scheduled_at(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT execution_id, scheduled_at FROM executions WHERE status = 'SCHEDULED'")
        )
        return {str(r[0]): int(r[1]) for r in rows}


def _result(job_id: int, failed: bool) -> ExecutionResult:
    return ExecutionResult(
        execution_id=f"e-{job_id}",
        job_id=job_id,
        worker_id="w1",
        status=ExecutionStatus.FAILED if failed else ExecutionStatus.SUCCEEDED,
        message="boom" if failed else None,
        started_at=1_100,
        ended_at=1_200,
    )


def _edge(engine: Engine, child: int, parent: int) -> None:
    with engine.begin() as conn:
        insert_edges(conn, [(child, After(parent, DependOn.SUCCEEDED))])
        conn.execute(sa.text("UPDATE jobs SET has_dependencies = 1 WHERE id = :c"), {"c": child})


def test_ended_parents_wake_their_held_children_and_nothing_else(
    engine: Engine, redis_client: redis.Redis
) -> None:
    clock = ClusterClock(redis_client)
    make_app(engine, "first")
    make_app(engine, "second")
    later = clock.now_ms() + LATER_MS
    # Per app: a parent that succeeds, one that fails for good, one whose failure is
    # retried (its children must wait on), and one still running.
    woken: list[str] = []
    kept: list[str] = []
    ending: list[ExecutionResult] = []
    for app_pk in (1, 2):
        done, failed, running = _jobs(engine, app_pk, ["done", "failed", "running"])
        (retried,) = _jobs(engine, app_pk, ["retried"], retries=2)
        _queued(engine, [done, failed, retried, running])
        ending += [
            _result(done, failed=False),
            _result(failed, failed=True),
            _result(retried, failed=True),
        ]
        for parent in (done, failed, retried, running):
            (child,) = _jobs(engine, app_pk, [f"child-of-{parent}"])
            _edge(engine, child, parent)
            held = _scheduled(engine, child, later, HELD.format(parent=parent), 1)
            (woken if parent in (done, failed) else kept).append(held)
            if parent == done:
                # A retry's backoff is its own later time, not a hold for the parent.
                kept.append(_scheduled(engine, child, later, None, 2))
    assert all(v == later for v in _scheduled_at(engine).values())

    before = clock.now_ms()
    record_results(engine, clock, ending)

    scheduled = _scheduled_at(engine)
    assert {e for e in woken if scheduled[e] <= clock.now_ms()} == set(woken)
    assert all(scheduled[e] >= before for e in woken)
    assert {e: scheduled[e] for e in kept} == {e: later for e in kept}


def test_creating_a_child_flags_its_parents(engine: Engine) -> None:
    app = make_app(engine)
    assert app.app_id
    parent, other, child = _jobs(engine, 1, ["parent", "other", "child"])
    _edge(engine, child, parent)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, has_children FROM jobs")).all()
    flags = {int(r[0]): bool(r[1]) for r in rows}
    assert flags == {
        parent: True,
        other: False,
        child: False,
    }


def test_parent_runs_the_firer_skips_or_cancels_wake_their_held_children(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    clock = ClusterClock(redis_client)
    make_app(engine, "first")
    make_app(engine, "second")
    fire = firer(engine, redis_client, connection)
    now = clock.now_ms()
    later = now + LATER_MS
    woken: list[str] = []
    kept: list[str] = []
    ended: dict[str, str] = {}
    # Per app: a cancelled parent (its run CANCELLED), a paused cron (its trigger
    # SKIPPED), a one-shot parent paused (its run held: not ended) and one that is sent.
    for app_pk in (1, 2):
        cancelled, paused_cron, paused, sent = _jobs(
            engine, app_pk, ["cancelled", "paused-cron", "paused", "sent"]
        )
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE jobs SET status = CASE WHEN id = :c THEN 'CANCELLED' "
                    "WHEN id IN (:p, :q) THEN 'PAUSED' ELSE 'RUNNING' END, "
                    "cron_expr = CASE WHEN id = :p THEN '* * * * *' END WHERE app_pk = :a"
                ),
                {"c": cancelled, "p": paused_cron, "q": paused, "a": app_pk},
            )
        for parent in (cancelled, paused_cron, paused, sent):
            run = f"p-{parent}"
            with engine.begin() as conn:
                insert_executions(conn, [NewExecution(run, parent, 1, now - 5, now - 5)], now)
            (child,) = _jobs(engine, app_pk, [f"child-of-{parent}"])
            _edge(engine, child, parent)
            held = _scheduled(engine, child, later, HELD.format(parent=parent), 1)
            (woken if parent in (cancelled, paused_cron) else kept).append(held)
            ended[run] = {cancelled: "CANCELLED", paused_cron: "SKIPPED"}.get(parent, "")

    fire.load()
    before = clock.now_ms()
    assert fire.fire_due() == 2  # the two sent parents' runs

    found = statuses(engine)
    assert {run: found[run] for run, end in ended.items() if end} == {
        run: end for run, end in ended.items() if end
    }
    scheduled = _scheduled_at(engine)
    assert {e for e in woken if scheduled[e] <= clock.now_ms()} == set(woken)
    assert all(scheduled[e] >= before - 1_000 for e in woken)
    assert {e: scheduled[e] for e in kept} == {e: later for e in kept}
