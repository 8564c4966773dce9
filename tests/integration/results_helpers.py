"""Builders for tests of the results path: QUEUED runs, and results as workers send them."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.config import StoreSettings
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_jobs
from common.messages import ExecutionResult, ResultBatch
from common.states import ExecutionStatus
from common.topology import RESULTS_EXCHANGE, RESULTS_QUEUE, declare_core
from tests.integration.helpers import make_app

CALLBACK_URL = "http://127.0.0.1:9/hook"


def queued_jobs(engine: Engine, count: int) -> list[int]:
    """``count`` one-shot jobs, every other one with a callback, each with a QUEUED run
    ``e-<job id>`` on worker w1."""
    make_app(engine)
    callback = [None, CALLBACK_URL]
    new = [
        NewJob(1, f"j{n}", "demo.noop", {}, None, 1_000, callback[n % 2], None, None)
        for n in range(count)
    ]
    with engine.begin() as conn:
        job_ids = insert_jobs(conn, new, 0)
        runs = [NewExecution(f"e-{j}", j, 1, 1_000, 1_000).queued_on("w1") for j in job_ids]
        insert_executions(conn, runs, 1_000)
        # As a claim leaves a one-shot job: RUNNING, its trigger handed out.
        conn.execute(sa.text("UPDATE jobs SET status = 'RUNNING', next_trigger_time = NULL"))
    return job_ids


def publish_bodies(settings: StoreSettings, bodies: list[bytes]) -> None:
    """Publish results messages as they are, one message per body."""
    connection = connect(settings, "test results")
    try:
        declare_core(connection.channel())
        messages = [
            OutgoingMessage(RESULTS_EXCHANGE, RESULTS_QUEUE, body, f"r-{n}")
            for n, body in enumerate(bodies)
        ]
        BatchPublisher(connection.channel()).publish(messages)
    finally:
        connection.close()


def publish_results(settings: StoreSettings, job_ids: list[int]) -> None:
    """One SUCCEEDED results message per job, as workers send them."""
    publish_bodies(settings, [succeeded(j) for j in job_ids])


def succeeded(job_id: int) -> bytes:
    """The results message of ``e-<job id>`` ending SUCCEEDED on w1."""
    result = ExecutionResult(
        execution_id=f"e-{job_id}",
        job_id=job_id,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=1_100,
        ended_at=1_200,
    )
    return ResultBatch(worker_id="w1", results=[result]).model_dump_json().encode()
