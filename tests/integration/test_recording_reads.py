"""The reads of the claim and fire paths look up the rows they name instead of reading
the whole table: they are made once per batch, at thousands of jobs a second."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.executions import NewExecution, insert_executions, jobs_with_runs
from common.db.jobs import NewJob, insert_jobs
from common.states import ExecutionStatus
from tests.integration.helpers import make_app

JOBS = 3_000
# MariaDB turns an IN list this long into a join with a table of its values.
CLAIM_BATCH = 1_000


@pytest.fixture
def sent(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """The statements the engine sends (text, parameters) while the test runs."""
    statements: list[tuple[str, Any]] = []

    def record(*args: Any) -> None:
        statements.append((str(args[2]), args[3]))

    sa.event.listen(engine, "before_cursor_execute", record)
    yield statements
    sa.event.remove(engine, "before_cursor_execute", record)


def _tables_scanned(engine: Engine, statement: str, parameters: Any) -> set[str]:
    """The tables MariaDB's plan for the statement reads whole."""
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN " + statement, parameters).mappings().all()
    return {str(row["table"]) for row in plan if row["type"] == "ALL"}


@pytest.mark.parametrize("batch_size", [100, CLAIM_BATCH])
def test_a_claim_batch_reads_its_jobs_runs_not_every_run(
    engine: Engine, sent: list[tuple[str, Any]], batch_size: int
) -> None:
    """A batch of new jobs, while two thousand runs of other jobs are in flight."""
    make_app(engine)
    new = NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None)
    with engine.begin() as conn:
        ids = insert_jobs(conn, [new] * JOBS, 0)
    going, batch = ids[:2_000], ids[2_000 : 2_000 + batch_size]
    with engine.begin() as conn:
        runs = [NewExecution(f"e-{j}", j, 1, 1, 1) for j in [*going, batch[0]]]
        insert_executions(conn, runs, 1)
        conn.execute(sa.text("ANALYZE TABLE executions")).all()
    statuses = (ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED)
    sent.clear()
    with engine.connect() as conn:
        assert jobs_with_runs(conn, batch, statuses) == {batch[0]}
    (statement, parameters) = sent[-1]
    assert "executions" not in _tables_scanned(engine, statement, parameters)
