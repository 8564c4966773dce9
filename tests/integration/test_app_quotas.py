"""The quotas an operator sets per app, through the real API on MySQL and Redis: the most
jobs stored (429 naming the quota; a batch refused whole) and the shortest schedule
interval (422 naming the field; a batch item by item; a patch only when it changes the
schedule), and the most retries a job may ask for (422 naming `maxRetries`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.db.records import AppLimits

JOBS = "/openapi/jobs"
BATCH = "/openapi/jobs/batch"


def limited(engine: Engine, app_id: str, **limits: Any) -> None:
    with MySqlAppTransactions(engine).transaction() as apps:
        assert apps.set_limits(app_id, AppLimits(**limits))


@pytest.fixture
def api(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[TestClient]:
    """The API, started after the test set its limits (they come with the app's key)."""
    from services.api.app import create_app

    with TestClient(create_app(ApiSettings(namespace=namespace.namespace))) as client:
        client.headers["Authorization"] = f"Bearer {app_credentials.api_key}"
        yield client


def job(name: str = "j", **fields: Any) -> dict[str, Any]:
    return {"jobName": name, "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"} | (
        fields
    )


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def test_a_full_job_quota_is_a_429_naming_it_and_deleted_jobs_free_room(
    engine: Engine, app_credentials: AppCredentials, request: pytest.FixtureRequest
) -> None:
    limited(engine, app_credentials.app_id, max_jobs=2)
    client: TestClient = request.getfixturevalue("api")
    first = client.post(JOBS, json=job("a"))
    assert first.status_code == 202 and client.post(JOBS, json=job("b")).status_code == 202
    refused = client.post(JOBS, json=job("c"))
    assert refused.status_code == 429, refused.text
    problem = refused.json()
    assert problem["type"] == "urn:kairos:problem:job-quota-exceeded"
    assert "maxJobs is 2" in problem["detail"]
    assert f"kairos app limits {app_credentials.app_id} --max-jobs" in problem["detail"]
    batch = client.post(BATCH, json={"jobs": [job("d")]})
    assert batch.status_code == 429 and job_count(engine) == 2
    assert client.delete(f"{JOBS}/{first.json()['jobId']}").status_code in (200, 204)
    assert client.post(JOBS, json=job("e")).status_code == 202


def test_a_batch_past_the_job_quota_is_refused_whole(
    engine: Engine, app_credentials: AppCredentials, request: pytest.FixtureRequest
) -> None:
    limited(engine, app_credentials.app_id, max_jobs=2)
    client: TestClient = request.getfixturevalue("api")
    refused = client.post(BATCH, json={"jobs": [job("a"), job("b"), job("c")]})
    assert refused.status_code == 429 and job_count(engine) == 0
    ok = client.post(BATCH, json={"jobs": [job("a", clientRequestId="a"), job("b")]})
    assert ok.status_code == 202, ok.text
    # A repeat whose items exist already adds nothing, so it is not refused.
    again = client.post(BATCH, json={"jobs": [job("a", clientRequestId="a")]})
    assert again.status_code == 202, again.text


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cronExpr": "*/5 * * * *"}, "cronExpr"),
        ({"cronExpr": "0,1 9 * * *"}, "cronExpr"),  # hourly apart but one pair 60 s apart
        ({"fixedRateSeconds": 60}, "fixedRateSeconds"),
    ],
)
def test_a_schedule_under_the_shortest_interval_is_a_422_naming_the_field(
    engine: Engine,
    app_credentials: AppCredentials,
    request: pytest.FixtureRequest,
    fields: dict[str, Any],
    field: str,
) -> None:
    limited(engine, app_credentials.app_id, min_cron_interval_seconds=3600)
    client: TestClient = request.getfixturevalue("api")
    body = {"jobName": "r", "jobHandler": "demo.noop", **fields}
    refused = client.post(JOBS, json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["type"] == "urn:kairos:problem:schedule-too-frequent"
    [error] = refused.json()["errors"]
    assert error["field"] == field and "minCronIntervalSeconds is 3600" in error["message"]
    assert "--min-cron-interval" in error["message"]
    hourly = {"jobName": "h", "jobHandler": "demo.noop", "cronExpr": "0 * * * *"}
    assert client.post(JOBS, json=hourly).status_code == 202
    batch = client.post(BATCH, json={"jobs": [hourly, body]})
    assert batch.status_code == 422
    assert [e["field"] for e in batch.json()["errors"]] == [f"jobs[1].{field}"]
    assert job_count(engine) == 1


def test_a_patch_meets_the_interval_only_when_it_changes_the_schedule(
    engine: Engine, app_credentials: AppCredentials, request: pytest.FixtureRequest
) -> None:
    client: TestClient = request.getfixturevalue("api")
    frequent = {"jobName": "f", "jobHandler": "demo.noop", "cronExpr": "*/5 * * * *"}
    created = client.post(JOBS, json=frequent)
    assert created.status_code == 202
    job_id = created.json()["jobId"]
    limited(engine, app_credentials.app_id, min_cron_interval_seconds=3600)
    state = client.app.state.kairos  # type: ignore[attr-defined]
    state._apps.clear()  # the quota came after the key was cached
    renamed = client.patch(f"{JOBS}/{job_id}", json={"jobName": "renamed"})
    assert renamed.status_code == 200, renamed.text
    faster = client.patch(f"{JOBS}/{job_id}", json={"cronExpr": "* * * * *"})
    assert faster.status_code == 422 and faster.json()["errors"][0]["field"] == "cronExpr"
    slower = client.patch(f"{JOBS}/{job_id}", json={"cronExpr": "0 * * * *"})
    assert slower.status_code == 200, slower.text


def test_more_retries_than_the_apps_limit_is_a_422_naming_it(
    engine: Engine, app_credentials: AppCredentials, request: pytest.FixtureRequest
) -> None:
    limited(engine, app_credentials.app_id, max_retries=3)
    client: TestClient = request.getfixturevalue("api")
    refused = client.post(JOBS, json=job("many", maxRetries=4))
    assert refused.status_code == 422, refused.text
    assert refused.json()["type"] == "urn:kairos:problem:retries-over-limit"
    [error] = refused.json()["errors"]
    assert error["field"] == "maxRetries" and "maxRetries is 3" in error["message"]
    assert "--max-retries" in error["message"]
    assert client.post(JOBS, json=job("few", maxRetries=3)).status_code == 202
    batch = client.post(BATCH, json={"jobs": [job("a", maxRetries=1), job("b", maxRetries=9)]})
    assert batch.status_code == 422
    assert [e["field"] for e in batch.json()["errors"]] == ["jobs[1].maxRetries"]
    assert job_count(engine) == 1


def test_a_patch_meets_the_retry_limit_only_when_it_changes_the_retries(
    engine: Engine, app_credentials: AppCredentials, request: pytest.FixtureRequest
) -> None:
    client: TestClient = request.getfixturevalue("api")
    created = client.post(JOBS, json=job("r", maxRetries=10))
    assert created.status_code == 202
    job_id = created.json()["jobId"]
    limited(engine, app_credentials.app_id, max_retries=2)
    state = client.app.state.kairos  # type: ignore[attr-defined]
    state._apps.clear()  # the limit came after the key was cached
    renamed = client.patch(f"{JOBS}/{job_id}", json={"jobName": "renamed", "maxRetries": 10})
    assert renamed.status_code == 200, renamed.text
    more = client.patch(f"{JOBS}/{job_id}", json={"maxRetries": 5})
    assert more.status_code == 422 and more.json()["errors"][0]["field"] == "maxRetries"
    fewer = client.patch(f"{JOBS}/{job_id}", json={"maxRetries": 2})
    assert fewer.status_code == 200, fewer.text
