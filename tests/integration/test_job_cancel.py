"""Cancelling a job through the OpenAPI on real MySQL and Redis: its scheduled runs go
with it, a run already going is recorded, and triggers racing the cancel leave nothing."""

from __future__ import annotations

import json
import threading

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.apps import AppCredentials
from common.db.due_jobs import find_due_jobs
from common.errors import InvalidTransitionError
from common.states import ExecutionStatus
from services.api import job_control, trigger
from tests.books import Expectation, assert_books
from tests.integration.control_helpers import (
    FUTURE,
    add_execution,
    api_state,
    assert_refused,
    claim_due,
    create,
    executions_of,
    job_row,
    record,
    set_status,
)
from tests.integration.helpers import DEMO_HANDLERS


@pytest.mark.parametrize("status", ["WAITING", "RUNNING", "PAUSED"])
def test_cancel_cancels_the_job_and_its_scheduled_executions_only(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    other_id = create(client, triggerAt=FUTURE)
    scheduled = add_execution(engine, job_id, ExecutionStatus.SCHEDULED, 1)
    queued = add_execution(engine, job_id, ExecutionStatus.QUEUED, 2)
    untouched = add_execution(engine, other_id, ExecutionStatus.SCHEDULED, 1)
    set_status(engine, job_id, status)
    response = client.post(f"/openapi/jobs/{job_id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "CANCELLED"
    assert response.json()["nextTriggerTime"] is None
    by_id = {e["execution_id"]: e for e in executions_of(engine, job_id)}
    assert by_id[scheduled]["status"] == "CANCELLED"
    assert by_id[scheduled]["ended_at"] is not None
    assert by_id[queued]["status"] == "QUEUED"
    assert [e["status"] for e in executions_of(engine, other_id)] == ["SCHEDULED"]
    assert executions_of(engine, other_id)[0]["execution_id"] == untouched
    assert job_row(engine, job_id)["status"] == "CANCELLED"
    with engine.connect() as conn:
        assert [j.id for j in find_due_jobs(conn, FUTURE, DEMO_HANDLERS, 10)] == [other_id]


def test_a_run_going_at_cancel_is_recorded_and_the_job_stays_cancelled(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client, maxRetries=3)
    claim_due(engine, redis_client)
    [execution] = executions_of(engine, job_id)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE executions SET status = 'QUEUED' WHERE id = :i"), {"i": execution["id"]}
        )
    client.post(f"/openapi/jobs/{job_id}/cancel")
    record(engine, redis_client, job_id, execution["execution_id"], "FAILED")
    assert [e["status"] for e in executions_of(engine, job_id)] == ["FAILED"]
    assert job_row(engine, job_id)["status"] == "CANCELLED"
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, {"FAILED"}), timeout=0)


def test_cancel_again_changes_nothing(client: TestClient, engine: Engine) -> None:
    job_id = create(client)
    client.post(f"/openapi/jobs/{job_id}/cancel")
    before = job_row(engine, job_id)
    again = client.post(f"/openapi/jobs/{job_id}/cancel")
    assert again.status_code == 200
    assert again.json()["status"] == "CANCELLED"
    assert job_row(engine, job_id) == before


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED"])
def test_cancel_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    set_status(engine, job_id, status)
    scheduled = add_execution(engine, job_id, ExecutionStatus.SCHEDULED, 1, manual=True)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/cancel")
    assert_refused(response, job_id, status, "WAITING, RUNNING or PAUSED", "cancelled")
    assert job_row(engine, job_id) == before
    assert [(e["execution_id"], e["status"]) for e in executions_of(engine, job_id)] == [
        (scheduled, "SCHEDULED")
    ]


def test_triggers_racing_a_cancel_leave_no_scheduled_run_of_the_cancelled_job(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    state = api_state(client)
    app = state.app_for_key(app_credentials.api_key)
    assert app is not None
    accepted: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(5)
    first_accepted = threading.Event()

    def trigger_many() -> None:
        start.wait()
        for _ in range(15):
            try:
                accepted.append(
                    json.loads(trigger.trigger_job(state, app, job_id)[0].response)["executionId"]
                )
                first_accepted.set()
            except InvalidTransitionError:
                return
            except BaseException as e:
                errors.append(e)
                return

    def cancel_soon() -> None:
        start.wait()
        if first_accepted.wait(30):
            job_control.cancel_job(state, app, job_id)

    threads = [threading.Thread(target=trigger_many) for _ in range(4)]
    threads.append(threading.Thread(target=cancel_soon))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert 0 < len(accepted) < 60
    rows = executions_of(engine, job_id)
    assert sorted(r["execution_id"] for r in rows) == sorted(accepted)
    assert {r["status"] for r in rows} == {"CANCELLED"}
    assert job_row(engine, job_id)["status"] == "CANCELLED"
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, {"CANCELLED"}), timeout=0)
