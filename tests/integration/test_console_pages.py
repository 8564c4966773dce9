"""Console pages: a job that fires no more, dead callbacks counted and explained, the
retry tiers folded into one row of the overview."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials
from tests.integration.console_helpers import make_operator, sign_in
from tests.integration.control_helpers import executions_of


@pytest.fixture
def console(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[TestClient]:
    from services.api.app import create_app

    with TestClient(create_app(ApiSettings(namespace=namespace.namespace))) as client:
        yield client


def test_a_job_with_no_next_trigger_says_so_outside_the_numbered_list(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    headers = {"Authorization": f"Bearer {app_credentials.api_key}"}
    body = {"jobName": "once", "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}
    job_id = console.post("/openapi/jobs", json=body, headers=headers).json()["jobId"]
    assert console.post(f"/openapi/jobs/{job_id}/cancel", headers=headers).status_code == 200
    sign_in(console, make_operator(engine))
    page = console.get(f"/console/jobs/{job_id}").text
    assert "none: the job does not fire again by schedule" in page
    assert "<li>none:" not in page, "not shown as the first of the next triggers"


def test_a_job_page_shows_a_runs_own_params_and_the_jittered_fire_times(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    headers = {"Authorization": f"Bearer {app_credentials.api_key}"}
    body: dict[str, Any] = {"jobName": "spread", "jobHandler": "demo.noop"}
    body |= {"cronExpr": "0 * * * *", "jitterSeconds": 1_200, "params": {"job": "own-of-job"}}
    job_id = console.post("/openapi/jobs", json=body, headers=headers).json()["jobId"]
    run = {"params": {"run": "own-of-run"}}
    triggered = console.post(f"/openapi/jobs/{job_id}/trigger", json=run, headers=headers)
    assert triggered.status_code == 202
    console.post(f"/openapi/jobs/{job_id}/trigger", headers=headers)
    sign_in(console, make_operator(engine))
    page = console.get(f"/console/jobs/{job_id}").text
    assert page.count("params of this run") == 1, "only the run with its own params"
    assert "own-of-run" in page
    assert "up to 1200 s" in page
    assert page.count('class="fires-at"') >= 4, "five triggers, almost surely jittered"


def test_the_console_triggers_with_params_and_refuses_what_is_no_json_object(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    headers = {"Authorization": f"Bearer {app_credentials.api_key}"}
    body = {"jobName": "hourly", "jobHandler": "demo.noop", "cronExpr": "0 * * * *"}
    job_id = console.post("/openapi/jobs", json=body, headers=headers).json()["jobId"]
    csrf = sign_in(console, make_operator(engine))
    assert 'name="params"' in console.get(f"/console/jobs/{job_id}").text
    path = f"/console/jobs/{job_id}/trigger"
    for bad, says in (("[1]", "must be a JSON object"), ("{x", "is not JSON")):
        refused = console.post(path, data={"csrf": csrf, "params": bad})
        assert says in refused.text
    assert executions_of(engine, job_id) == []
    done = console.post(path, data={"csrf": csrf, "params": '{"day": "2026-12-01"}'})
    assert f"Job {job_id} triggered with its own params" in done.text
    plain = console.post(path, data={"csrf": csrf, "params": "  "})
    assert f"Job {job_id} triggered: execution" in plain.text
    runs = executions_of(engine, job_id)
    assert [None if r["params"] is None else json.loads(r["params"]) for r in runs] == [
        {"day": "2026-12-01"},
        None,
    ]


def test_the_dead_callbacks_page_counts_deliveries_and_says_why_each_died(
    console: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    from common.states import DeadReason, DeliveryStatus
    from tests.integration.test_callback_reads import add_delivery, attempt

    headers = {"Authorization": f"Bearer {app_credentials.api_key}"}
    body = {"jobName": "hooked", "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}
    job_id = console.post("/openapi/jobs", json=body, headers=headers).json()["jobId"]
    delivery_id = add_delivery(engine, job_id)
    dead = {"status": DeliveryStatus.DEAD, "dead_reason": DeadReason.GONE}
    attempt(engine, delivery_id, 1, status_code=410, error="HTTP 410", **dead)
    attempt(engine, delivery_id, 1, status_code=410, error="HTTP 410", **dead)  # after a replay
    sign_in(console, make_operator(engine))
    page = console.get("/console/callbacks/dead").text
    assert "failed their last retry tier" not in page, "a 410 is not a retry tier's end"
    assert "1 dead delivery" in page and "gone</td>" in page
    assert "POSTs</th>" in page and '"POSTs">2</td>' in page


def test_the_overview_folds_the_retry_tiers_into_one_row_that_opens(
    console: TestClient, engine: Engine, namespace: StoreSettings
) -> None:
    import time

    from common.broker import connect
    from common.topology import declare_core, declare_retry_tiers
    from common.vhost import vhost_queues

    connection = connect(namespace, "test")
    try:
        declare_core(connection.channel())
        declare_retry_tiers(connection.channel(), [10_000, 120_000, 1_440_000])
    finally:
        connection.close()
    deadline = time.monotonic() + 30
    while len(vhost_queues(namespace)) < 7 and time.monotonic() < deadline:
        time.sleep(0.2)  # the management API lists a new queue a moment later
    sign_in(console, make_operator(engine))
    page = console.get("/console/").text
    summary = page.index("<summary><code>kairos.callbacks.retry.*</code> <small>3 retry tiers")
    assert page.index("<code>kairos.results</code>") < summary
    assert summary < page.index("<code>kairos.callbacks.dead</code>")
    tiers = [page.index(f"kairos.callbacks.retry.{s}<") for s in ("10s", "120s", "1440s")]
    assert tiers == sorted(tiers), "by delay, not as text"
