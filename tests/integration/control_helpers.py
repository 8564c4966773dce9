"""Builders and readers shared by the job control tests (tests/integration/test_job_*.py):
jobs created through the OpenAPI, rows read and set in MySQL, and the dispatcher's own
claim and result recording where a transition meets them."""

from __future__ import annotations

import uuid
from typing import Any

import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.executions import NewExecution, insert_executions
from common.keys import RedisKeys
from common.loadbalance import WorkerChooser
from common.messages import ExecutionResult
from common.states import ExecutionStatus
from services.api.state import ApiState
from services.dispatcher.outcomes.recording import record_results
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender
from tests.integration.helpers import DEMO_HANDLERS

FUTURE = 4_102_444_800_000  # 2100-01-01
FINAL = ["SUCCEEDED", "FAILED", "CANCELLED"]


def api_state(client: TestClient) -> ApiState:
    """The running API's state (its clock, its stores)."""
    state: ApiState = client.app.state.kairos  # type: ignore[attr-defined]
    return state


def body(**overrides: Any) -> dict[str, Any]:
    """A create request for a demo.echo job, with ``overrides``."""
    base: dict[str, Any] = {"jobName": "report", "jobHandler": "demo.echo", "params": {"a": 1}}
    base.update(overrides)
    return base


def create(client: TestClient, **overrides: Any) -> int:
    """Create a job through the OpenAPI; its id."""
    response = client.post("/openapi/jobs", json=body(**overrides))
    assert response.status_code == 202, response.text
    job_id: int = response.json()["jobId"]
    return job_id


def job_row(engine: Engine, job_id: int) -> dict[str, Any]:
    """The job's row, every column."""
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM jobs WHERE id = :j"), {"j": job_id}).one()
    return dict(row._mapping)


def set_status(engine: Engine, job_id: int, status: str) -> None:
    """Put the job in ``status`` by hand."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET status = :s WHERE id = :j"), {"s": status, "j": job_id}
        )


def executions_of(engine: Engine, job_id: int) -> list[dict[str, Any]]:
    """The job's execution rows, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT * FROM executions WHERE job_id = :j ORDER BY id"), {"j": job_id}
        ).all()
    return [dict(r._mapping) for r in rows]


def add_execution(
    engine: Engine, job_id: int, status: ExecutionStatus, trigger_time: int, manual: bool = False
) -> str:
    """An execution of the job in ``status`` on w1, written by hand; its id."""
    execution_id = str(uuid.uuid4())
    with engine.begin() as conn:
        insert_executions(
            conn, [NewExecution(execution_id, job_id, 1, trigger_time, 0, manual=manual)], 0
        )
        conn.execute(
            sa.text("UPDATE executions SET status = :s, worker_id = 'w1' WHERE execution_id = :e"),
            {"s": str(status), "e": execution_id},
        )
    return execution_id


def claim_due(engine: Engine, redis_client: redis.Redis) -> None:
    """One claim of the due jobs, as the dispatcher makes it."""
    clock = ClusterClock(redis_client)
    TriggerClaimer(engine, clock, 100, 1_000, ClaimSender(WorkerChooser())).claim(DEMO_HANDLERS)


def record(
    engine: Engine, redis_client: redis.Redis, job_id: int, execution_id: str, status: str
) -> None:
    """Record the execution's result as the dispatcher's results consumer does."""
    result = ExecutionResult(
        execution_id=execution_id,
        job_id=job_id,
        worker_id="w1",
        status=status,  # type: ignore[arg-type]
        started_at=1,
        ended_at=2,
    )
    record_results(engine, ClusterClock(redis_client), [result])


def assert_refused(response: Any, job_id: int, status: str, allowed: str, done: str) -> None:
    """The response is the 409 problem of a transition the job's status does not allow."""
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["title"] == "Invalid transition"
    assert problem["detail"] == f"job {job_id} is {status}; only a {allowed} job can be {done}"


def wake_length(redis_client: redis.Redis, namespace: StoreSettings) -> int:
    """How many wake-ups wait for the dispatcher."""
    return int(redis_client.llen(RedisKeys(namespace.namespace).wake))
