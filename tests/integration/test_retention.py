"""Retention deletes old finished history and keeps everything else."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.deliveries import NewDelivery, insert_deliveries
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.db.retention import prune_deliveries, prune_executions
from common.states import ExecutionStatus
from tests.integration.helpers import make_app


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
        insert_deliveries(
            conn,
            [
                NewDelivery("d1", "e1", job_id, 1, "http://x/", "{}"),
                NewDelivery("d2", "e2", job_id, 1, "http://x/", "{}"),
            ],
            100,
        )
        conn.execute(sa.text("UPDATE callback_deliveries SET status='DELIVERED' WHERE id=1"))
        assert prune_deliveries(conn, 1_000, limit=10) == 1
    assert count(engine, "callback_deliveries") == 1
