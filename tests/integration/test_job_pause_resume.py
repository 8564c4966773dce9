"""Pausing and resuming a job through the OpenAPI on real MySQL and Redis: allowed and
refused, a claimed run going on, and what a resume does with the triggers missed meanwhile."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.due_jobs import find_due_jobs
from common.schedule import PAUSE_SKIP_ROWS, PAUSED_SKIP
from tests.books import Expectation, assert_books
from tests.integration.control_helpers import (
    FINAL,
    FUTURE,
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


@pytest.mark.parametrize("status", ["WAITING", "RUNNING"])
def test_pause_moves_a_live_job_to_paused(client: TestClient, engine: Engine, status: str) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/pause")
    assert response.status_code == 200
    assert response.json()["status"] == "PAUSED"
    after = job_row(engine, job_id)
    assert after["status"] == "PAUSED"
    assert after["version"] == before["version"] + 1
    assert after["updated_at"] >= before["updated_at"]


def test_a_paused_job_is_not_claimed(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client)
    client.post(f"/openapi/jobs/{job_id}/pause")
    claim_due(engine, redis_client)
    with engine.connect() as conn:
        assert find_due_jobs(conn, FUTURE, DEMO_HANDLERS, 10) == []
    assert executions_of(engine, job_id) == []
    assert job_row(engine, job_id)["status"] == "PAUSED"


def test_pause_lets_a_claimed_run_go_on(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client)
    claim_due(engine, redis_client)
    client.post(f"/openapi/jobs/{job_id}/pause")
    [execution] = executions_of(engine, job_id)
    assert execution["status"] == "SCHEDULED"
    record(engine, redis_client, job_id, execution["execution_id"], "SUCCEEDED")
    assert job_row(engine, job_id)["status"] == "SUCCEEDED"
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=0)


def test_pause_again_changes_nothing(client: TestClient, engine: Engine) -> None:
    job_id = create(client)
    client.post(f"/openapi/jobs/{job_id}/pause")
    before = job_row(engine, job_id)
    again = client.post(f"/openapi/jobs/{job_id}/pause")
    assert again.status_code == 200
    assert again.json()["status"] == "PAUSED"
    assert job_row(engine, job_id) == before


@pytest.mark.parametrize("status", FINAL)
def test_pause_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/pause")
    assert_refused(response, job_id, status, "WAITING or RUNNING", "paused")
    assert job_row(engine, job_id) == before


def test_resume_waits_again_with_the_trigger_time_kept(client: TestClient, engine: Engine) -> None:
    job_id = create(client, triggerAt=1_000)
    client.post(f"/openapi/jobs/{job_id}/pause")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert response.status_code == 200
    assert response.json()["status"] == "WAITING"
    assert response.json()["nextTriggerTime"] == "1970-01-01T00:00:01.000Z"
    row = job_row(engine, job_id)
    assert (row["status"], row["next_trigger_time"]) == ("WAITING", 1_000)
    with engine.connect() as conn:
        assert [j.id for j in find_due_jobs(conn, FUTURE, DEMO_HANDLERS, 10)] == [job_id]


def paused_cron(client: TestClient, engine: Engine, missed_ms: int, **fields: Any) -> int:
    """A recurring job paused with its next trigger ``missed_ms`` before now."""
    job_id = create(client, **fields)
    client.post(f"/openapi/jobs/{job_id}/pause")
    now = api_state(client).clock.now_ms()
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET next_trigger_time = :t WHERE id = :j"),
            {"t": (now - missed_ms) // 1000 * 1000, "j": job_id},
        )
    return job_id


def test_resume_of_a_cron_job_skips_the_triggers_inside_the_pause(
    client: TestClient, engine: Engine
) -> None:
    # Paused for less than the misfire threshold: no trigger of the pause may run.
    job_id = paused_cron(client, engine, 5_000, cronExpr="* * * * * *")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    now = api_state(client).clock.now_ms()
    assert response.status_code == 200
    skipped = executions_of(engine, job_id)
    assert 5 <= len(skipped) <= 6
    assert {(e["status"], e["message"]) for e in skipped} == {("SKIPPED", PAUSED_SKIP)}
    row = job_row(engine, job_id)
    assert row["status"] == "WAITING"
    assert row["next_trigger_time"] >= now - 1_000
    assert all(e["trigger_time"] < row["next_trigger_time"] for e in skipped)
    assert_books(engine, Expectation([job_id], {"WAITING"}, {"SKIPPED"}), timeout=0)


def test_a_long_pause_records_its_first_missed_triggers_and_says_there_were_more(
    client: TestClient, engine: Engine
) -> None:
    job_id = paused_cron(client, engine, 3_600_000, fixedRateSeconds=1)
    client.post(f"/openapi/jobs/{job_id}/resume")
    skipped = executions_of(engine, job_id)
    assert len(skipped) == PAUSE_SKIP_ROWS
    last = max(skipped, key=lambda e: e["trigger_time"])
    assert "the later triggers until the resume" in last["message"]
    assert_books(engine, Expectation([job_id], {"WAITING"}, {"SKIPPED"}), timeout=0)


def test_resume_of_a_one_shot_job_whose_run_is_pending_is_running(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client)
    claim_due(engine, redis_client)
    assert job_row(engine, job_id)["status"] == "RUNNING"
    client.post(f"/openapi/jobs/{job_id}/pause")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert response.json()["status"] == "RUNNING"
    [execution] = executions_of(engine, job_id)
    record(engine, redis_client, job_id, execution["execution_id"], "FAILED")
    assert job_row(engine, job_id)["status"] == "FAILED"
    assert_books(engine, Expectation([job_id], {"FAILED"}, {"FAILED"}), timeout=0)


def test_resume_of_a_one_shot_job_with_only_a_manual_run_waits(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{job_id}/trigger")
    client.post(f"/openapi/jobs/{job_id}/pause")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert response.json()["status"] == "WAITING"
    assert job_row(engine, job_id)["status"] == "WAITING"


@pytest.mark.parametrize(("overlap", "expected"), [("QUEUE", "RUNNING"), ("FORBID", "WAITING")])
def test_resume_of_a_recurring_job_is_held_only_under_overlap_queue(
    client: TestClient, engine: Engine, redis_client: redis.Redis, overlap: str, expected: str
) -> None:
    job_id = create(client, fixedRateSeconds=3600, overlapPolicy=overlap)
    claim_due(engine, redis_client)
    [execution] = executions_of(engine, job_id)
    client.post(f"/openapi/jobs/{job_id}/pause")
    client.post(f"/openapi/jobs/{job_id}/resume")
    assert job_row(engine, job_id)["status"] == expected
    record(engine, redis_client, job_id, execution["execution_id"], "SUCCEEDED")
    assert job_row(engine, job_id)["status"] == "WAITING"
    assert_books(engine, Expectation([job_id], {"WAITING"}, {"SUCCEEDED"}), timeout=0)


@pytest.mark.parametrize("status", ["WAITING", "RUNNING"])
def test_resume_of_a_live_job_changes_nothing(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    assert client.post(f"/openapi/jobs/{job_id}/resume").status_code == 200
    assert job_row(engine, job_id) == before


@pytest.mark.parametrize("status", FINAL)
def test_resume_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert_refused(response, job_id, status, "PAUSED", "resumed")
    assert job_row(engine, job_id) == before
