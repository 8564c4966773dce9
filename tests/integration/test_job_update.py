"""Updating a job through the OpenAPI (PATCH) on real MySQL: the schedule recomputed,
the rest kept, and bad input a clear 422 that writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.apps import AppCredentials
from common.db.jobs import NewJob, insert_job
from tests.integration.control_helpers import (
    FINAL,
    FUTURE,
    api_state,
    assert_refused,
    create,
    job_row,
    set_status,
)


def test_update_of_the_cron_expression_recomputes_the_next_trigger(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    before = job_row(engine, job_id)
    now = api_state(client).clock.now_ms()
    response = client.patch(f"/openapi/jobs/{job_id}", json={"cronExpr": "0  12 * * *"})
    assert response.status_code == 200, response.text
    view = response.json()
    assert view["cronExpr"] == "0 12 * * *"
    assert view["nextTriggerTime"].endswith("T12:00:00.000Z")
    after = job_row(engine, job_id)
    assert now < after["next_trigger_time"] <= now + 86_400_000
    assert after["version"] == before["version"] + 1
    assert after["updated_at"] >= now


def test_update_of_the_time_zone_moves_the_next_trigger(client: TestClient) -> None:
    job_id = create(client, cronExpr="0 12 * * *")
    view = client.patch(f"/openapi/jobs/{job_id}", json={"timezone": "Asia/Tokyo"}).json()
    assert view["nextTriggerTime"].endswith("T03:00:00.000Z")
    assert view["policies"]["timezone"] == "Asia/Tokyo"


def test_update_of_the_fixed_rate_fires_next_one_period_after_now(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE, fixedRateSeconds=3600)
    now = api_state(client).clock.now_ms()
    response = client.patch(f"/openapi/jobs/{job_id}", json={"fixedRateSeconds": 60})
    assert response.status_code == 200
    assert now + 60_000 <= job_row(engine, job_id)["next_trigger_time"] <= now + 65_000


def test_a_recurring_job_may_switch_from_cron_to_fixed_rate(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    response = client.patch(
        f"/openapi/jobs/{job_id}", json={"cronExpr": None, "fixedRateSeconds": 120}
    )
    assert response.status_code == 200, response.text
    row = job_row(engine, job_id)
    assert (row["cron_expr"], row["fixed_rate_seconds"]) == (None, 120)


def test_update_without_a_schedule_change_keeps_the_next_trigger(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(
        client,
        cronExpr="0 0 1 1 *",
        callbackUrl="https://example.com/hook",
        timeoutSeconds=30,
    )
    before = job_row(engine, job_id)
    patch = {
        "jobName": "renamed",
        "params": {"b": [1, 2]},
        "maxRetries": 2,
        "overlapPolicy": "QUEUE",
        "callbackUrl": None,
        "timeoutSeconds": None,
    }
    view = client.patch(f"/openapi/jobs/{job_id}", json=patch).json()
    assert (view["jobName"], view["params"], view["callbackUrl"]) == (
        "renamed",
        {"b": [1, 2]},
        None,
    )
    assert view["policies"]["maxRetries"] == 2
    assert view["policies"]["overlapPolicy"] == "QUEUE"
    assert view["policies"]["timeoutSeconds"] is None
    after = job_row(engine, job_id)
    assert after["next_trigger_time"] == before["next_trigger_time"]
    assert after["client_request_id"] == before["client_request_id"]
    assert after["request_hash"] == before["request_hash"]


def test_a_patch_that_changes_nothing_writes_nothing(client: TestClient, engine: Engine) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    before = job_row(engine, job_id)
    for patch in ({}, {"jobName": "report", "cronExpr": "0 0 1 1 *", "timezone": "UTC"}):
        assert client.patch(f"/openapi/jobs/{job_id}", json=patch).status_code == 200
    assert job_row(engine, job_id) == before


def test_update_keeps_a_handler_no_worker_registers_now(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    with engine.begin() as conn:
        app_pk = conn.execute(
            sa.text("SELECT id FROM apps WHERE app_id = :a"), {"a": app_credentials.app_id}
        ).scalar_one()
        job = NewJob(app_pk, "old", "retired.handler", {}, None, FUTURE, None, None, None)
        job_id = insert_job(conn, job, 0)
    response = client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "still here"})
    assert response.status_code == 200, response.text
    assert response.json()["jobHandler"] == "retired.handler"


CRON = {"cronExpr": "0 0 1 1 *"}
ONE_SHOT = {"triggerAt": FUTURE}


@pytest.mark.parametrize(
    ("created", "patch", "field"),
    [
        (CRON, {"cronExpr": "*/5 * *"}, "cronExpr"),
        (CRON, {"cronExpr": "99 * * * *"}, "cronExpr"),
        (CRON, {"timezone": "Mars/Olympus_Mons"}, "timezone"),
        (CRON, {"params": {"blob": "x" * (64 * 1024)}}, "params"),
        (CRON, {"callbackUrl": "ftp://example.com/hook"}, "callbackUrl"),
        (CRON, {"jobName": None}, "jobName"),
        (CRON, {"jobName": ""}, "jobName"),
        (CRON, {"maxRetries": -1}, "maxRetries"),
        (CRON, {"misfirePolicy": "SOMETIMES"}, "misfirePolicy"),
        (CRON, {"jobHandler": "demo.fail"}, "jobHandler"),
        (CRON, {"fixedRateSeconds": 60}, "fixedRateSeconds"),
        (CRON, {"cronExpr": None}, "cronExpr"),
        ({"fixedRateSeconds": 60}, {"fixedRateSeconds": None}, "fixedRateSeconds"),
        (ONE_SHOT, {"cronExpr": "0 * * * *"}, "cronExpr"),
        (ONE_SHOT, {"fixedRateSeconds": 60}, "fixedRateSeconds"),
    ],
)
def test_bad_update_is_a_clear_422_and_writes_nothing(
    client: TestClient,
    engine: Engine,
    created: dict[str, Any],
    patch: dict[str, Any],
    field: str,
) -> None:
    job_id = create(client, **created)
    before = job_row(engine, job_id)
    response = client.patch(f"/openapi/jobs/{job_id}", json=patch)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert field in problem["detail"]
    assert field in str(problem["errors"])
    assert job_row(engine, job_id) == before


def test_a_one_shot_job_refuses_a_schedule_with_a_message(client: TestClient) -> None:
    job_id = create(client, triggerAt=FUTURE)
    problem = client.patch(f"/openapi/jobs/{job_id}", json={"cronExpr": "0 * * * *"}).json()
    assert problem["errors"] == [
        {
            "field": "cronExpr",
            "message": "a one-shot job cannot be given a schedule; submit a new job with it",
        }
    ]


@pytest.mark.parametrize("status", FINAL)
def test_update_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "late"})
    assert_refused(response, job_id, status, "WAITING, RUNNING or PAUSED", "updated")
    assert job_row(engine, job_id) == before
