"""Triggering a job by hand through the OpenAPI on real MySQL and Redis: a manual
execution, allowed for every job not cancelled, that leaves the job's state alone."""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from tests.books import Expectation, assert_books
from tests.integration.control_helpers import (
    FUTURE,
    api_state,
    assert_refused,
    claim_due,
    create,
    executions_of,
    job_row,
    record,
    set_status,
    wake_length,
)


def test_trigger_creates_a_scheduled_manual_execution_and_wakes_the_dispatcher(
    client: TestClient, engine: Engine, namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    assert wake_length(redis_client, namespace) == 0
    before = job_row(engine, job_id)
    now = api_state(client).clock.now_ms()
    response = client.post(f"/openapi/jobs/{job_id}/trigger")
    assert response.status_code == 202
    answer = response.json()
    assert answer["jobId"] == job_id
    assert answer["status"] == "SCHEDULED"
    [execution] = executions_of(engine, job_id)
    assert execution["execution_id"] == answer["executionId"]
    assert (execution["status"], execution["attempt"], execution["manual"]) == (
        "SCHEDULED",
        1,
        1,
    )
    assert now <= execution["scheduled_at"] <= now + 5_000
    assert execution["trigger_time"] == execution["scheduled_at"]
    assert wake_length(redis_client, namespace) == 1
    assert job_row(engine, job_id) == before
    listed = client.get(f"/openapi/jobs/{job_id}/executions").json()["executions"]
    assert [e["executionId"] for e in listed] == [answer["executionId"]]


@pytest.mark.parametrize("status", ["WAITING", "RUNNING", "PAUSED", "SUCCEEDED", "FAILED"])
def test_trigger_is_allowed_for_every_job_not_cancelled(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    set_status(engine, job_id, status)
    assert client.post(f"/openapi/jobs/{job_id}/trigger").status_code == 202
    assert [e["status"] for e in executions_of(engine, job_id)] == ["SCHEDULED"]
    assert job_row(engine, job_id)["status"] == status


def test_trigger_is_refused_for_a_cancelled_job(client: TestClient, engine: Engine) -> None:
    job_id = create(client, triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{job_id}/cancel")
    response = client.post(f"/openapi/jobs/{job_id}/trigger")
    assert_refused(
        response,
        job_id,
        "CANCELLED",
        "WAITING, RUNNING, SUCCEEDED, FAILED or PAUSED",
        "triggered",
    )
    assert executions_of(engine, job_id) == []


def test_triggers_in_the_same_millisecond_get_the_next_free_trigger_time(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    monkeypatch.setattr(api_state(client).clock, "now_ms", lambda: 1_700_000_000_000)
    answers = [client.post(f"/openapi/jobs/{job_id}/trigger") for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 202]
    rows = executions_of(engine, job_id)
    assert [r["trigger_time"] - 1_700_000_000_000 for r in rows] == [0, 1, 2]
    assert {r["scheduled_at"] for r in rows} == {1_700_000_000_000}
    assert len({a.json()["executionId"] for a in answers}) == 3


def test_a_manual_run_leaves_a_finished_job_finished(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client)
    claim_due(engine, redis_client)
    [run] = executions_of(engine, job_id)
    record(engine, redis_client, job_id, run["execution_id"], "SUCCEEDED")
    assert job_row(engine, job_id)["status"] == "SUCCEEDED"
    execution_id = client.post(f"/openapi/jobs/{job_id}/trigger").json()["executionId"]
    record(engine, redis_client, job_id, execution_id, "FAILED")
    assert job_row(engine, job_id)["status"] == "SUCCEEDED"
    last = client.get(f"/openapi/jobs/{job_id}").json()["lastExecution"]
    assert (last["executionId"], last["status"]) == (execution_id, "FAILED")
    # The trigger's own run decided the job; the manual run that failed after it did not.
    expected = Expectation([job_id], {"SUCCEEDED"}, {"SUCCEEDED", "FAILED"})
    assert assert_books(engine, expected, timeout=0).outcomes == {"SUCCEEDED": 1, "FAILED": 1}
