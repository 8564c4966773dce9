"""A trigger with params on real MySQL and Redis: the run's own params are validated as
a job's, stored on its execution only (NULL for every other run), shown by the API, read
by the firer in place of the job's, carried on by a retry, and bound to an
Idempotency-Key."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.executions_with_job import scheduled_until
from tests.integration.control_helpers import (
    FUTURE,
    api_state,
    claim_due,
    create,
    executions_of,
    job_row,
    record,
)
from tests.integration.helpers import make_app


def _trigger(client: TestClient, job_id: int, body: Any = None, **headers: str) -> Any:
    return client.post(f"/openapi/jobs/{job_id}/trigger", json=body, headers=headers)


def _due_params(engine: Engine) -> dict[str, Any]:
    """What the firer reads for each due execution: execution id -> params it sends."""
    with engine.connect() as conn:
        rows = scheduled_until(conn, FUTURE * 2, 10_000)
    return {r.execution_id: json.loads(r.params) for r in rows}


def test_a_trigger_with_params_runs_with_them_and_the_job_keeps_its_own(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE, params={"a": 1})
    response = _trigger(client, job_id, {"params": {"day": "2026-12-01", "n": [1, 2]}})
    assert response.status_code == 202, response.text
    execution_id = response.json()["executionId"]
    [row] = executions_of(engine, job_id)
    assert json.loads(row["params"]) == {"day": "2026-12-01", "n": [1, 2]}
    assert json.loads(job_row(engine, job_id)["params"]) == {"a": 1}
    shown = client.get(f"/openapi/executions/{execution_id}").json()
    assert shown["params"] == {"day": "2026-12-01", "n": [1, 2]}
    listed = client.get(f"/openapi/jobs/{job_id}/executions").json()["executions"]
    assert listed[0]["params"] == {"day": "2026-12-01", "n": [1, 2]}
    assert _due_params(engine) == {execution_id: {"day": "2026-12-01", "n": [1, 2]}}


@pytest.mark.parametrize("body", [None, {}, {"params": None}])
def test_a_trigger_without_params_stores_none_and_runs_with_the_jobs(
    client: TestClient, engine: Engine, body: Any
) -> None:
    job_id = create(client, triggerAt=FUTURE, params={"a": 1})
    response = _trigger(client, job_id, body)
    assert response.status_code == 202, response.text
    [row] = executions_of(engine, job_id)
    assert row["params"] is None
    shown = client.get(f"/openapi/executions/{response.json()['executionId']}").json()
    assert shown["params"] is None
    assert _due_params(engine) == {response.json()["executionId"]: {"a": 1}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"params": [1, 2]}, "params"),
        ({"params": "text"}, "params"),
        ({"params": {"a": 1}, "extra": 1}, "extra"),
        ({"params": {"x": "y" * 70_000}}, "params"),
    ],
)
def test_bad_trigger_params_are_a_422_and_nothing_is_written(
    client: TestClient, engine: Engine, body: Any, field: str
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    response = _trigger(client, job_id, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert any(field in e["field"] for e in response.json()["errors"]), response.json()
    assert executions_of(engine, job_id) == []


def test_a_null_body_is_refused_as_the_document_says_and_nothing_is_written(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    response = client.post(
        f"/openapi/jobs/{job_id}/trigger",
        content=b" null ",
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "body"
    assert executions_of(engine, job_id) == []
    empty = client.post(
        f"/openapi/jobs/{job_id}/trigger", headers={"Content-Type": "application/json"}
    )
    assert empty.status_code == 202, "no body at all runs the job's params"


def test_params_nested_too_deep_are_refused_naming_where(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(40):
        inner["x"] = {}
        inner = inner["x"]
    response = _trigger(client, job_id, {"params": deep})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "params"
    assert executions_of(engine, job_id) == []


def test_the_same_key_with_the_same_params_replays_and_with_other_params_is_refused(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    first = _trigger(client, job_id, {"params": {"b": 2, "a": 1}}, **{"Idempotency-Key": "k1"})
    assert first.status_code == 202, first.text
    again = _trigger(client, job_id, {"params": {"a": 1, "b": 2}}, **{"Idempotency-Key": "k1"})
    assert again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    for other in ({"params": {"a": 2}}, None, {"params": None}):
        refused = _trigger(client, job_id, other, **{"Idempotency-Key": "k1"})
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["type"] == "urn:kairos:problem:idempotency-conflict"
        assert "other params" in problem["detail"]
    assert len(executions_of(engine, job_id)) == 1


def test_a_key_used_without_params_is_refused_with_params(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    assert _trigger(client, job_id, None, **{"Idempotency-Key": "k2"}).status_code == 202
    refused = _trigger(client, job_id, {"params": {"a": 1}}, **{"Idempotency-Key": "k2"})
    assert refused.status_code == 422
    assert [r["params"] for r in executions_of(engine, job_id)] == [None]


def test_a_retry_of_a_run_with_params_keeps_them(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client, triggerAt=FUTURE, maxRetries=1, retryBackoffSeconds=0)
    execution_id = _trigger(client, job_id, {"params": {"own": True}}).json()["executionId"]
    record(engine, redis_client, job_id, execution_id, "FAILED")
    first, retry = executions_of(engine, job_id)
    assert (first["status"], retry["attempt"], retry["manual"]) == ("FAILED", 2, 1)
    assert json.loads(retry["params"]) == {"own": True}
    assert _due_params(engine) == {retry["execution_id"]: {"own": True}}


def test_scheduled_runs_claimed_beside_triggered_ones_keep_the_jobs_params(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    now = api_state(client).clock.now_ms()
    job_id = create(client, triggerAt=now + 60_000, params={"job": 1})
    execution_id = _trigger(client, job_id, {"params": {"run": 1}}).json()["executionId"]
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE jobs SET next_trigger_time = %s WHERE id = %s", (now, job_id))
    claim_due(engine, redis_client)
    rows = executions_of(engine, job_id)
    claimed = [r for r in rows if not r["manual"]]
    assert len(claimed) == 1 and claimed[0]["params"] is None
    due = _due_params(engine)
    assert due[execution_id] == {"run": 1}
    if claimed[0]["execution_id"] in due:  # still SCHEDULED: no live worker took it
        assert due[claimed[0]["execution_id"]] == {"job": 1}


def test_concurrent_triggers_with_params_across_apps_are_all_accounted_for(
    client: TestClient, engine: Engine
) -> None:
    """Three apps, eight jobs each, every job triggered five times at once with its own
    params (some without): every run holds exactly the params it was sent with."""
    apps = [client.headers["Authorization"]] + [
        f"Bearer {make_app(engine, f'app-{n}').api_key}" for n in range(2)
    ]
    jobs: list[tuple[str, int]] = []
    for auth in apps:
        for n in range(8):
            body: dict[str, Any] = {"jobName": f"j{n}", "jobHandler": "demo.echo"}
            body.update(params={"job": n}, triggerAt=FUTURE)
            made = client.post("/openapi/jobs", json=body, headers={"Authorization": auth})
            assert made.status_code == 202, made.text
            jobs.append((auth, made.json()["jobId"]))
    calls = [(auth, job_id, i) for auth, job_id in jobs for i in range(5)]

    def fire(call: tuple[str, int, int]) -> tuple[int, int, str]:
        auth, job_id, i = call
        body = None if i == 4 else {"params": {"job": job_id, "i": i}}
        answer = _trigger(client, job_id, body, Authorization=auth)
        assert answer.status_code == 202, answer.text
        return job_id, i, answer.json()["executionId"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        sent = list(pool.map(fire, calls))
    assert len({execution_id for *_, execution_id in sent}) == len(calls)
    stored = {
        r["execution_id"]: r["params"] for _, job_id in jobs for r in executions_of(engine, job_id)
    }
    assert len(stored) == len(calls)
    for job_id, i, execution_id in sent:
        expected = None if i == 4 else {"job": job_id, "i": i}
        got = stored[execution_id]
        assert (None if got is None else json.loads(got)) == expected
    due = _due_params(engine)
    job_params = {job_id: n % 8 for n, (_, job_id) in enumerate(jobs)}
    for job_id, i, execution_id in sent:
        expected = {"job": job_params[job_id]} if i == 4 else {"job": job_id, "i": i}
        assert due[execution_id] == expected
