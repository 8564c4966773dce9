"""Input Kairos cannot store, render or schedule is refused at the API with a 422 naming
the field, and nothing is written: create, batch and PATCH, on real MySQL and Redis."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.jobs import NewJob
from common.documents import MAX_DEPTH
from common.timefmt import MAX_INSTANT_MS
from services.api import batch, job_control
from services.api.job_control import patched_columns
from services.api.state import ApiState
from services.api.validation import build_job

BATCH = "/openapi/jobs/batch"
FUTURE = 4_102_444_800_000  # 2100-01-01


def job_rows(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM jobs ORDER BY id")).all()
    return [dict(r._mapping) for r in rows]


def body(**overrides: Any) -> dict[str, Any]:
    return {"jobName": "report", "jobHandler": "demo.echo", "params": {"a": 1}, **overrides}


def post_raw(client: TestClient, path: str, raw: str, method: str = "POST") -> Any:
    return client.request(method, path, content=raw, headers={"content-type": "application/json"})


def assert_names(response: Any, field: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert field in [error["field"] for error in problem["errors"]], problem


def nested(levels: int) -> dict[str, Any]:
    document: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        document = {"k": document}
    return document


BAD_TRIGGER_AT: list[Any] = [-100_000_000_000_000, -1, MAX_INSTANT_MS + 1, 10**30, True, False, 1.5]
BAD_TRIGGER_AT += ["0001-01-01T00:00:00Z", "99999999999999999999999"]


@pytest.mark.parametrize("trigger_at", BAD_TRIGGER_AT)
def test_a_trigger_time_kairos_cannot_keep_is_refused_at_create(
    client: TestClient, engine: Engine, trigger_at: Any
) -> None:
    assert_names(client.post("/openapi/jobs", json=body(triggerAt=trigger_at)), "triggerAt")
    assert job_rows(engine) == []


@pytest.mark.parametrize("trigger_at", [-100_000_000_000_000, 10**30, True])
def test_a_bad_trigger_time_in_a_batch_names_its_item(
    client: TestClient, engine: Engine, trigger_at: Any
) -> None:
    items = [body(triggerAt=FUTURE), body(triggerAt=trigger_at)]
    assert_names(client.post(BATCH, json={"jobs": items}), "jobs[1].triggerAt")
    assert job_rows(engine) == []


@pytest.mark.parametrize(
    "field",
    ["fixedRateSeconds", "maxRetries", "timeoutSeconds", "misfireThresholdSeconds"],
)
def test_true_is_no_number_at_create_batch_or_patch(
    client: TestClient, engine: Engine, field: str
) -> None:
    assert_names(client.post("/openapi/jobs", json=body(**{field: True})), field)
    items = [body(triggerAt=FUTURE), body(**{field: True})]
    assert_names(client.post(BATCH, json={"jobs": items}), f"jobs[1].{field}")
    job_id = client.post("/openapi/jobs", json=body(cronExpr="0 * * * *")).json()["jobId"]
    before = job_rows(engine)
    assert_names(client.patch(f"/openapi/jobs/{job_id}", json={field: True}), field)
    assert job_rows(engine) == before


def test_patch_takes_no_trigger_time(client: TestClient, engine: Engine) -> None:
    job_id = client.post("/openapi/jobs", json=body(triggerAt=FUTURE)).json()["jobId"]
    before = job_rows(engine)
    patched = client.patch(f"/openapi/jobs/{job_id}", json={"triggerAt": -100_000_000_000_000})
    assert_names(patched, "triggerAt")
    assert job_rows(engine) == before


def test_a_time_without_offset_is_read_in_the_jobs_zone(client: TestClient) -> None:
    created = client.post(
        "/openapi/jobs", json=body(triggerAt="2030-06-01T08:00:00", timezone="Asia/Shanghai")
    )
    job = client.get(f"/openapi/jobs/{created.json()['jobId']}").json()
    assert job["nextTriggerTime"] == "2030-06-01T00:00:00.000Z"


def test_the_latest_time_kairos_takes_is_stored_and_shown(client: TestClient) -> None:
    created = client.post("/openapi/jobs", json=body(triggerAt="9999-12-31T23:59:59.999Z"))
    assert created.status_code == 202, created.text
    job = client.get(f"/openapi/jobs/{created.json()['jobId']}").json()
    assert job["nextTriggerTime"] == "9999-12-31T23:59:59.999Z"


@pytest.mark.parametrize(
    ("params", "where"),
    [
        (nested(MAX_DEPTH + 1), "nested"),
        (nested(300), "nested"),
        ({"a": "\ud800"}, "lone surrogate"),
        ({"\udfff": 1}, "lone surrogate"),
    ],
)
def test_params_no_stage_could_read_back_are_refused(
    client: TestClient, engine: Engine, params: dict[str, Any], where: str
) -> None:
    raw = json.dumps(body(params=params, triggerAt=FUTURE))  # \\uXXXX escapes, as clients send
    response = post_raw(client, "/openapi/jobs", raw)
    assert_names(response, "params")
    assert where in response.json()["detail"]
    items = json.dumps({"jobs": [body(triggerAt=FUTURE), body(params=params)]})
    assert_names(post_raw(client, BATCH, items), "jobs[1].params")
    job_id = client.post("/openapi/jobs", json=body(triggerAt=FUTURE)).json()["jobId"]
    before = job_rows(engine)
    patch = post_raw(client, f"/openapi/jobs/{job_id}", json.dumps({"params": params}), "PATCH")
    assert_names(patch, "params")
    assert job_rows(engine) == before
    assert client.get(f"/openapi/jobs/{job_id}").status_code == 200


def test_params_at_the_depth_limit_are_stored_and_read_back(client: TestClient) -> None:
    created = client.post("/openapi/jobs", json=body(params=nested(MAX_DEPTH), triggerAt=FUTURE))
    assert created.status_code == 202, created.text
    job = client.get(f"/openapi/jobs/{created.json()['jobId']}").json()
    assert job["params"] == nested(MAX_DEPTH)


def test_a_body_too_deep_for_the_json_reader_is_a_422_problem(
    client: TestClient, engine: Engine
) -> None:
    raw = '{"jobName":"r","jobHandler":"demo.echo","params":{"a":' + "[" * 5000
    raw += "]" * 5000 + "}}"
    response = post_raw(client, "/openapi/jobs", raw)
    assert_names(response, "body")
    assert "nest" in response.json()["detail"]
    assert job_rows(engine) == []


@pytest.mark.parametrize(
    "field", ["jobName", "cronExpr", "timezone", "callbackUrl", "clientRequestId"]
)
def test_a_lone_surrogate_in_any_text_field_is_refused(
    client: TestClient, engine: Engine, field: str
) -> None:
    raw = json.dumps(body(**{field: "x\ud800"}))
    assert_names(post_raw(client, "/openapi/jobs", raw), field)
    assert job_rows(engine) == []


@pytest.mark.parametrize("url", ["http://[::1", "http://example.com:abc/", "http://xn--zz.com/"])
def test_a_callback_url_the_parsers_choke_on_is_a_422(
    client: TestClient, engine: Engine, url: str
) -> None:
    assert_names(client.post("/openapi/jobs", json=body(callbackUrl=url)), "callbackUrl")
    assert_names(client.post(BATCH, json={"jobs": [body(callbackUrl=url)]}), "jobs[0].callbackUrl")
    job_id = client.post("/openapi/jobs", json=body(triggerAt=FUTURE)).json()["jobId"]
    before = job_rows(engine)
    assert_names(client.patch(f"/openapi/jobs/{job_id}", json={"callbackUrl": url}), "callbackUrl")
    assert job_rows(engine) == before


def api_state(client: TestClient) -> ApiState:
    state: ApiState = client.app.state.kairos  # type: ignore[attr-defined]
    return state


def manual_runs(engine: Engine, job_id: int) -> list[tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT execution_id, trigger_time FROM executions WHERE job_id = :j"),
            {"j": job_id},
        ).all()
    return [(str(r[0]), int(r[1])) for r in rows]


def test_many_manual_triggers_in_one_millisecond_each_get_an_execution(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = client.post("/openapi/jobs", json=body(triggerAt=FUTURE)).json()["jobId"]
    now = 1_700_000_000_000
    monkeypatch.setattr(api_state(client).clock, "now_ms", lambda: now)
    answers = [client.post(f"/openapi/jobs/{job_id}/trigger") for _ in range(25)]
    assert [a.status_code for a in answers] == [202] * 25, answers[-1].text
    runs = manual_runs(engine, job_id)
    assert {e for e, _ in runs} == {a.json()["executionId"] for a in answers}
    assert sorted(t - now for _, t in runs) == list(range(25))


def test_concurrent_manual_triggers_each_get_an_execution(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = client.post("/openapi/jobs", json=body(triggerAt=FUTURE)).json()["jobId"]
    monkeypatch.setattr(api_state(client).clock, "now_ms", lambda: 1_700_000_000_000)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(lambda _: client.post(f"/openapi/jobs/{job_id}/trigger"), range(40))
        )
    assert [a.status_code for a in answers] == [202] * 40
    assert len(manual_runs(engine, job_id)) == 40


def test_a_manual_trigger_leaves_the_jobs_own_trigger_time_free(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = 1_700_000_000_000
    job_id = client.post("/openapi/jobs", json=body(triggerAt=now + 1)).json()["jobId"]
    monkeypatch.setattr(api_state(client).clock, "now_ms", lambda: now)
    for _ in range(3):
        assert client.post(f"/openapi/jobs/{job_id}/trigger").status_code == 202
    assert sorted(t - now for _, t in manual_runs(engine, job_id)) == [0, 2, 3]


def test_an_unknown_route_is_a_problem(client: TestClient) -> None:
    response = client.get("/openapi/nothing-here")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["status"] == 404


# The last line: a value validation let through but MySQL refuses is still a 422.


def test_a_batch_item_mysql_refuses_is_a_422_naming_it(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def build_job_poisoned(body: Any, *args: Any) -> NewJob:
        built = build_job(body, *args)
        if body.jobName == "poison":
            return dataclasses.replace(built, next_trigger_time=2**70)
        return built

    monkeypatch.setattr(batch, "build_job", build_job_poisoned)
    items = [body(triggerAt=FUTURE), body(triggerAt=FUTURE), body(jobName="poison")]
    assert_names(client.post(BATCH, json={"jobs": items}), "jobs[2].triggerAt")
    assert job_rows(engine) == []


def test_a_patched_value_mysql_refuses_is_a_422_naming_it(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = client.post("/openapi/jobs", json=body(cronExpr="0 * * * *")).json()["jobId"]
    before = job_rows(engine)

    def columns_poisoned(*args: Any) -> dict[str, Any]:
        return {**patched_columns(*args), "next_trigger_time": 2**70}

    monkeypatch.setattr(job_control, "patched_columns", columns_poisoned)
    assert_names(client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "x"}), "triggerAt")
    assert job_rows(engine) == before


def test_a_number_too_long_to_read_is_a_422_naming_the_body(
    client: TestClient, engine: Engine
) -> None:
    raw = '{"jobName":"r","jobHandler":"demo.echo","params":{"n":' + "9" * 5000 + "}}"
    assert_names(post_raw(client, "/openapi/jobs", raw), "body")
    assert job_rows(engine) == []
