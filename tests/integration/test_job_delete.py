"""Deleting a job through the OpenAPI on real MySQL and Redis: hidden, cancelled with its
scheduled runs, and 404 to everything after."""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.integration.control_helpers import (
    FUTURE,
    claim_due,
    create,
    executions_of,
    job_row,
    set_status,
)


def test_delete_hides_the_job_and_cancels_its_scheduled_runs(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{job_id}/trigger")
    response = client.delete(f"/openapi/jobs/{job_id}")
    assert response.status_code == 204
    assert response.content == b""
    row = job_row(engine, job_id)
    assert row["status"] == "CANCELLED"
    assert row["deleted_at"] is not None
    assert [e["status"] for e in executions_of(engine, job_id)] == ["CANCELLED"]
    assert client.get(f"/openapi/jobs/{job_id}").status_code == 404
    assert client.get(f"/openapi/jobs/{job_id}/executions").status_code == 404
    assert client.get("/openapi/jobs").json()["jobs"] == []
    claim_due(engine, redis_client)
    assert [e["status"] for e in executions_of(engine, job_id)] == ["CANCELLED"]
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, {"CANCELLED"}), timeout=0)


def test_a_deleted_job_answers_404_to_everything(client: TestClient) -> None:
    job_id = create(client)
    client.delete(f"/openapi/jobs/{job_id}")
    assert client.delete(f"/openapi/jobs/{job_id}").status_code == 404
    for action in ("pause", "resume", "trigger", "cancel"):
        response = client.post(f"/openapi/jobs/{job_id}/{action}")
        assert response.status_code == 404
        assert response.json()["detail"] == f"job {job_id} does not exist"
    assert client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "x"}).status_code == 404


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "PAUSED"])
def test_delete_is_allowed_from_any_status(client: TestClient, engine: Engine, status: str) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    assert client.delete(f"/openapi/jobs/{job_id}").status_code == 204
    assert job_row(engine, job_id)["status"] == "CANCELLED"
