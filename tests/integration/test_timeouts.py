"""The leader's timeout scan finds runs past their job's timeout that no worker reported."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.jobs import JobPolicies, NewJob, insert_job
from common.db.sendable import overdue
from tests.integration.helpers import make_app


def queued_job(engine: Engine, name: str, timeout: int | None, dispatched_at: int) -> None:
    policies = JobPolicies(timeout_seconds=timeout)
    with engine.begin() as conn:
        job_id = insert_job(
            conn, NewJob(1, name, "demo.sleep", {}, None, 0, None, None, None, policies), 0
        )
        insert_executions(conn, [NewExecution(name, job_id, 1, 0, 0)], 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, [name]), "w1"), dispatched_at)


def test_only_runs_past_timeout_plus_grace_are_overdue(engine: Engine) -> None:
    make_app(engine)
    queued_job(engine, "late", timeout=10, dispatched_at=1_000)
    queued_job(engine, "in-grace", timeout=10, dispatched_at=20_000)
    queued_job(engine, "no-timeout", timeout=None, dispatched_at=1_000)
    with engine.connect() as conn:
        found = {r.execution_id for r in overdue(conn, now_ms=35_000, grace_ms=5_000, limit=10)}
    assert found == {"late"}
