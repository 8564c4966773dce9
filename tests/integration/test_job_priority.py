"""A job's priority through the OpenAPI on real MySQL: given at create (single and
batch) and by PATCH, stored in jobs.priority, shown by every read; a bad value is a 422
naming the field that writes nothing, and a retry with another priority is another
request."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.jobs import NewJob, insert_job
from tests.integration.control_helpers import FUTURE, body, create, job_row
from tests.integration.helpers import make_app

BATCH = "/openapi/jobs/batch"
BAD_PRIORITIES = [-1, 10, 2.5, True, "7", None]
# The request hash of {"jobName": "report", "jobHandler": "demo.echo"} as made before
# jobs had a priority (tests/unit/test_validation.py holds the same digest).
OLD_REQUEST_HASH = "8ddc0569920b1002a9283a5ce8df5e6e34e5d2d68d164ba79daa7f081ad904d2"


def count_jobs(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def test_a_job_created_without_a_priority_has_5(client: TestClient, engine: Engine) -> None:
    job_id = create(client, triggerAt=FUTURE)
    assert job_row(engine, job_id)["priority"] == 5
    assert client.get(f"/openapi/jobs/{job_id}").json()["priority"] == 5


def test_the_priority_given_is_stored_and_shown_by_get_and_list(
    client: TestClient, engine: Engine
) -> None:
    low = create(client, triggerAt=FUTURE, priority=0)
    high = create(client, triggerAt=FUTURE, priority=9)
    assert [job_row(engine, j)["priority"] for j in (low, high)] == [0, 9]
    assert client.get(f"/openapi/jobs/{high}").json()["priority"] == 9
    listed = client.get("/openapi/jobs").json()["jobs"]
    assert {view["jobId"]: view["priority"] for view in listed} == {low: 0, high: 9}


def test_each_batch_item_keeps_its_own_priority(client: TestClient, engine: Engine) -> None:
    items = [body(jobName=f"n{n}", triggerAt=FUTURE, priority=n) for n in (1, 8)]
    items.append(body(jobName="plain", triggerAt=FUTURE))
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 202, response.text
    ids = [item["jobId"] for item in response.json()["jobs"]]
    assert [job_row(engine, j)["priority"] for j in ids] == [1, 8, 5]


@pytest.mark.parametrize("value", BAD_PRIORITIES)
def test_a_bad_priority_at_create_is_a_422_naming_it(
    client: TestClient, engine: Engine, value: Any
) -> None:
    response = client.post("/openapi/jobs", json=body(priority=value))
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["priority"]
    assert count_jobs(engine) == 0


def test_a_bad_priority_in_a_batch_names_its_item(client: TestClient, engine: Engine) -> None:
    items = [body(jobName="a"), body(jobName="b", priority=12)]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["jobs[1].priority"]
    assert count_jobs(engine) == 0


def test_patch_changes_the_priority_alone(client: TestClient, engine: Engine) -> None:
    job_id = create(client, triggerAt=FUTURE)
    before = job_row(engine, job_id)
    response = client.patch(f"/openapi/jobs/{job_id}", json={"priority": 8})
    assert response.status_code == 200, response.text
    assert response.json()["priority"] == 8
    after = job_row(engine, job_id)
    assert after["priority"] == 8 and after["version"] == before["version"] + 1
    assert {k: v for k, v in after.items() if k not in ("priority", "version", "updated_at")} == {
        k: v for k, v in before.items() if k not in ("priority", "version", "updated_at")
    }


def test_a_patch_of_other_fields_keeps_the_priority(client: TestClient, engine: Engine) -> None:
    job_id = create(client, triggerAt=FUTURE, priority=2)
    response = client.patch(f"/openapi/jobs/{job_id}", json={"maxRetries": 3})
    assert response.status_code == 200, response.text
    assert response.json()["priority"] == 2 and job_row(engine, job_id)["priority"] == 2


@pytest.mark.parametrize("value", BAD_PRIORITIES)
def test_a_bad_priority_in_a_patch_is_a_422_that_writes_nothing(
    client: TestClient, engine: Engine, value: Any
) -> None:
    job_id = create(client, triggerAt=FUTURE, priority=3)
    before = job_row(engine, job_id)
    response = client.patch(f"/openapi/jobs/{job_id}", json={"priority": value})
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["priority"]
    assert job_row(engine, job_id) == before


def test_a_job_keyed_before_priorities_still_answers_its_retries(
    client: TestClient, engine: Engine
) -> None:
    """A row written without a priority (the column's default) with a request hash made
    before priorities existed: a retry without a priority, or with 5, is the same job."""
    with engine.begin() as conn:
        app_pk = conn.execute(sa.text("SELECT MIN(id) FROM apps")).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO jobs (app_pk, job_name, handler, params, next_trigger_time, "
                "status, version, client_request_id, request_hash, created_at, updated_at) "
                "VALUES (:a, 'report', 'demo.echo', '{}', :t, 'WAITING', 0, 'r-1', :h, 1, 1)"
            ),
            {"a": app_pk, "t": FUTURE, "h": OLD_REQUEST_HASH},
        )
    plain = {"jobName": "report", "jobHandler": "demo.echo", "clientRequestId": "r-1"}
    first = client.post("/openapi/jobs", json=plain)
    again = client.post("/openapi/jobs", json={**plain, "priority": 5})
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert first.json()["jobId"] == again.json()["jobId"]
    assert again.headers["idempotent-replayed"] == "true"
    other = client.post("/openapi/jobs", json={**plain, "priority": 6})
    assert other.status_code == 422
    assert other.json()["type"] == "urn:kairos:problem:idempotency-conflict"
    assert count_jobs(engine) == 1


def test_a_retry_with_another_priority_is_a_conflict(client: TestClient, engine: Engine) -> None:
    first = client.post("/openapi/jobs", json=body(clientRequestId="k", priority=7))
    same = client.post("/openapi/jobs", json=body(clientRequestId="k", priority=7))
    other = client.post("/openapi/jobs", json=body(clientRequestId="k", priority=3))
    assert first.status_code == same.status_code == 202
    assert same.json()["jobId"] == first.json()["jobId"]
    assert other.status_code == 422
    assert other.json()["type"] == "urn:kairos:problem:idempotency-conflict"
    assert count_jobs(engine) == 1


def test_a_batch_retry_with_another_priority_is_a_conflict(
    client: TestClient, engine: Engine
) -> None:
    items = [body(jobName="a", priority=7)]
    headers = {"Idempotency-Key": "b-1"}
    first = client.post(BATCH, json={"jobs": items}, headers=headers)
    other = client.post(BATCH, json={"jobs": [body(jobName="a", priority=6)]}, headers=headers)
    assert first.status_code == 202
    assert other.status_code == 422
    assert other.json()["type"] == "urn:kairos:problem:idempotency-conflict"
    assert count_jobs(engine) == 1


def test_insert_job_stores_the_priority_of_a_new_job(engine: Engine) -> None:
    app_id = make_app(engine).app_id
    with engine.begin() as conn:
        app_pk = conn.execute(
            sa.text("SELECT id FROM apps WHERE app_id = :a"), {"a": app_id}
        ).scalar_one()
        job = NewJob(app_pk, "n", "demo.echo", {}, None, FUTURE, None, None, None, priority=9)
        job_id = insert_job(conn, job, 1)
    assert job_row(engine, job_id)["priority"] == 9


def test_a_priority_written_by_hand_outside_0_to_9_still_renders(
    client: TestClient, engine: Engine
) -> None:
    """Only the API writes priorities, and it takes 0 to 9; a row changed by hand is
    still shown as stored, not answered 500 (nor does it hide the app's other jobs)."""
    odd = create(client, triggerAt=FUTURE)
    plain = create(client, triggerAt=FUTURE)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET priority = 12 WHERE id = :j"), {"j": odd})
    answer = client.get(f"/openapi/jobs/{odd}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["priority"] == 12
    listed = client.get("/openapi/jobs")
    assert listed.status_code == 200, listed.text
    assert {j["jobId"]: j["priority"] for j in listed.json()["jobs"]} == {odd: 12, plain: 5}
