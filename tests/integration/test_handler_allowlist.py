"""An app restricted to handler patterns, through the real API on MySQL and Redis: a job
naming another handler is refused (create, batch, PATCH), a stored one cannot be run
anew (trigger, resume) but can be stopped, and the API's app cache takes a change
within its time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.handler_patterns import EVERY_HANDLER, NO_HANDLER, HandlerPatterns
from services.api.state import ApiState
from tests.integration.helpers import make_app

ClientFor = Callable[..., TestClient]


@pytest.fixture
def client_for(namespace: StoreSettings) -> Iterator[ClientFor]:
    """Start the API with settings of the test's choosing, calling as the given app."""
    from services.api.app import create_app

    opened: list[TestClient] = []

    def start(credentials: AppCredentials, **settings: Any) -> TestClient:
        api = ApiSettings(namespace=namespace.namespace, **settings)
        test_client = TestClient(create_app(api)).__enter__()
        test_client.headers["Authorization"] = f"Bearer {credentials.api_key}"
        opened.append(test_client)
        return test_client

    yield start
    for test_client in opened:
        test_client.__exit__(None, None, None)


def restrict(engine: Engine, app_id: str, *patterns: str) -> None:
    with MySqlAppTransactions(engine).transaction() as apps:
        granted = HandlerPatterns(patterns) if patterns else EVERY_HANDLER
        found = apps.set_handler_patterns(app_id, granted)
    assert found


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def job(name: str = "report", handler: str = "demo.echo", **fields: Any) -> dict[str, Any]:
    return {"jobName": name, "jobHandler": handler, "triggerAt": "2100-01-01T00:00:00Z", **fields}


def create(client: TestClient, **fields: Any) -> int:
    response = client.post("/openapi/jobs", json=job(**fields))
    assert response.status_code == 202, response.text
    job_id: int = response.json()["jobId"]
    return job_id


def assert_not_allowed(response: Any, field: str, handler: str, app_id: str) -> None:
    """A 422 naming ``field``, the handler, the app's patterns and the operator's command."""
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    errors = {error["field"]: error["message"] for error in response.json()["errors"]}
    message = errors[field]
    assert repr(handler) in message
    assert "'demo.e*'" in message
    assert f"kairos app handlers {app_id}" in message


# create, batch


def test_an_app_made_without_handler_patterns_may_call_none_and_is_told_how_to_grant(
    client_for: ClientFor, engine: Engine
) -> None:
    bare = make_app(engine, "bare", NO_HANDLER)
    response = client_for(bare).post("/openapi/jobs", json=job(handler="demo.echo"))
    assert response.status_code == 422, response.text
    message = {e["field"]: e["message"] for e in response.json()["errors"]}["jobHandler"]
    assert "granted no handler yet" in message
    assert f"kairos app handlers {bare.app_id} --allow" in message
    assert job_count(engine) == 0


def test_a_create_naming_a_handler_outside_the_patterns_is_422_and_writes_nothing(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    restrict(engine, app_credentials.app_id, "demo.e*")
    response = client.post("/openapi/jobs", json=job(handler="demo.noop"))
    assert_not_allowed(response, "jobHandler", "demo.noop", app_credentials.app_id)
    assert response.json()["title"] == "Handler not allowed"
    assert "may use only handlers matching" in response.json()["detail"]
    assert job_count(engine) == 0
    create(client, handler="demo.echo")  # inside the patterns
    assert job_count(engine) == 1


def test_the_same_refusal_holds_for_a_cron_create_built_off_the_event_loop(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    restrict(engine, app_credentials.app_id, "demo.e*")
    response = client.post("/openapi/jobs", json=job(handler="demo.fail", cronExpr="0 2 * * *"))
    assert_not_allowed(response, "jobHandler", "demo.fail", app_credentials.app_id)
    assert job_count(engine) == 0


def test_a_restriction_holds_for_its_app_only(
    client_for: ClientFor, engine: Engine, app_credentials: AppCredentials
) -> None:
    other = make_app(engine, "other")
    restrict(engine, app_credentials.app_id, "demo.e*")
    refused = client_for(app_credentials).post("/openapi/jobs", json=job(handler="demo.noop"))
    assert refused.status_code == 422
    assert client_for(other).post("/openapi/jobs", json=job(handler="demo.noop")).status_code == 202


def test_a_batch_names_each_item_whose_handler_is_outside_and_writes_nothing(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    restrict(engine, app_credentials.app_id, "demo.e*")
    items = [job("a"), job("b", "demo.noop"), job("c", "demo.echo"), job("d", "demo.fail")]
    response = client.post("/openapi/jobs/batch", json={"jobs": items})
    assert response.status_code == 422, response.text
    fields = [error["field"] for error in response.json()["errors"]]
    assert fields == ["jobs[1].jobHandler", "jobs[3].jobHandler"]
    assert_not_allowed(response, "jobs[1].jobHandler", "demo.noop", app_credentials.app_id)
    assert job_count(engine) == 0
    ok = client.post("/openapi/jobs/batch", json={"jobs": [items[0], items[2]]})
    assert ok.status_code == 202, ok.text


def test_an_unknown_handler_names_only_registered_handlers_the_app_may_use(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    restrict(engine, app_credentials.app_id, "demo.e*", "demo.missing")
    response = client.post("/openapi/jobs", json=job(handler="demo.missing"))
    assert response.status_code == 422
    message = response.json()["errors"][0]["message"]
    assert "(registered: demo.echo)" in message  # not demo.fail, demo.noop, demo.sleep


# jobs stored before the restriction


@pytest.fixture
def uncached(client_for: ClientFor, app_credentials: AppCredentials) -> TestClient:
    """The API without an app cache: every request reads the app's patterns anew."""
    return client_for(app_credentials, auth_cache_seconds=0)


def job_row(engine: Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM jobs WHERE id = :j"), {"j": job_id}).one()
    return dict(row._mapping)


def execution_count(engine: Engine, job_id: int) -> int:
    with engine.connect() as conn:
        query = sa.text("SELECT COUNT(*) FROM executions WHERE job_id = :j")
        return int(conn.execute(query, {"j": job_id}).scalar_one())


def test_a_patch_of_a_job_whose_handler_is_no_longer_allowed_is_422_and_writes_nothing(
    uncached: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = create(uncached, handler="demo.noop", cronExpr="0 2 * * *")
    restrict(engine, app_credentials.app_id, "demo.e*")
    before = job_row(engine, job_id)
    response = uncached.patch(f"/openapi/jobs/{job_id}", json={"cronExpr": "* * * * * *"})
    assert_not_allowed(response, "jobHandler", "demo.noop", app_credentials.app_id)
    assert job_row(engine, job_id) == before
    # The handler itself cannot be patched, so no PATCH turns a job to a handler outside.
    allowed = create(uncached, handler="demo.echo")
    sneaky = uncached.patch(f"/openapi/jobs/{allowed}", json={"jobHandler": "demo.noop"})
    assert sneaky.status_code == 422 and job_row(engine, allowed)["handler"] == "demo.echo"


def test_a_patch_of_a_job_inside_the_patterns_goes_through(
    uncached: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = create(uncached, handler="demo.echo")
    restrict(engine, app_credentials.app_id, "demo.e*")
    response = uncached.patch(f"/openapi/jobs/{job_id}", json={"jobName": "renamed"})
    assert response.status_code == 200, response.text
    assert job_row(engine, job_id)["job_name"] == "renamed"


def assert_forbidden(response: Any, job_id: int, app_id: str) -> None:
    assert response.status_code == 403, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["title"] == "Handler not allowed"
    detail = problem["detail"]
    assert f"job {job_id}" in detail and "'demo.noop'" in detail and "'demo.e*'" in detail
    assert f"kairos app handlers {app_id}" in detail


def test_a_manual_trigger_of_a_job_whose_handler_is_no_longer_allowed_is_403(
    uncached: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = create(uncached, handler="demo.noop")
    restrict(engine, app_credentials.app_id, "demo.e*")
    response = uncached.post(f"/openapi/jobs/{job_id}/trigger")
    assert_forbidden(response, job_id, app_credentials.app_id)
    assert execution_count(engine, job_id) == 0
    restrict(engine, app_credentials.app_id)  # lifted: the same trigger runs
    assert uncached.post(f"/openapi/jobs/{job_id}/trigger").status_code == 202
    assert execution_count(engine, job_id) == 1


def test_a_job_whose_handler_is_no_longer_allowed_can_be_paused_and_stopped_not_resumed(
    uncached: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = create(uncached, handler="demo.noop", cronExpr="0 2 * * *")
    restrict(engine, app_credentials.app_id, "demo.e*")
    assert uncached.get(f"/openapi/jobs/{job_id}").status_code == 200
    assert uncached.post(f"/openapi/jobs/{job_id}/pause").json()["status"] == "PAUSED"
    resumed = uncached.post(f"/openapi/jobs/{job_id}/resume")
    assert_forbidden(resumed, job_id, app_credentials.app_id)
    assert job_row(engine, job_id)["status"] == "PAUSED"
    assert uncached.post(f"/openapi/jobs/{job_id}/cancel").json()["status"] == "CANCELLED"
    other = create(uncached, handler="demo.echo", cronExpr="0 2 * * *")  # inside: no change
    uncached.post(f"/openapi/jobs/{other}/pause")
    assert uncached.post(f"/openapi/jobs/{other}/resume").json()["status"] == "WAITING"


def test_a_job_stored_before_the_restriction_keeps_its_schedule(
    uncached: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = create(uncached, handler="demo.noop", cronExpr="0 2 * * *")
    before = job_row(engine, job_id)
    restrict(engine, app_credentials.app_id, "demo.e*")
    shown = uncached.get(f"/openapi/jobs/{job_id}").json()
    assert shown["status"] == "WAITING" and shown["jobHandler"] == "demo.noop"
    assert job_row(engine, job_id) == before


# the API's app cache


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


def test_the_api_takes_a_changed_restriction_within_its_app_cache_time(
    client_for: ClientFor, engine: Engine, app_credentials: AppCredentials
) -> None:
    client = client_for(app_credentials, auth_cache_seconds=30)
    state: ApiState = client.app.state.kairos  # type: ignore[attr-defined]
    clock = FakeClock()
    state.monotonic = clock
    create(client, handler="demo.noop")  # the app, unrestricted, is now cached
    restrict(engine, app_credentials.app_id, "demo.e*")
    clock.now += 29
    create(client, handler="demo.noop")  # still inside the cache time: the old list
    clock.now += 1.5
    refused = client.post("/openapi/jobs", json=job(handler="demo.noop"))
    assert_not_allowed(refused, "jobHandler", "demo.noop", app_credentials.app_id)
    restrict(engine, app_credentials.app_id)
    clock.now += 31
    create(client, handler="demo.noop")  # lifted, once the cache lets go
