"""The OpenAPI against real MySQL and Redis: create, idempotency, validation, reads."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.keys import RedisKeys
from tests.integration.helpers import make_app

WAKE_WAIT_SECONDS = 5.0


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"jobName": "report", "jobHandler": "demo.echo", "params": {"a": 1}}
    base.update(overrides)
    return base


def test_create_answers_202_with_a_committed_job(client: TestClient, engine: Engine) -> None:
    response = client.post("/openapi/jobs", json=body())
    assert response.status_code == 202
    assert response.json()["status"] == "WAITING"
    job = client.get(f"/openapi/jobs/{response.json()['jobId']}").json()
    assert job["jobHandler"] == "demo.echo"
    assert job["params"] == {"a": 1}
    assert job["lastExecution"] is None
    assert job_count(engine) == 1


def test_create_due_now_wakes_the_dispatcher(
    client: TestClient, namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    client.post("/openapi/jobs", json=body())
    # The inserter answers the request, then wakes the dispatcher: on a busy box the
    # answer can come first.
    wake = RedisKeys(namespace.namespace).wake
    deadline = time.monotonic() + WAKE_WAIT_SECONDS
    while redis_client.llen(wake) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert redis_client.llen(wake) == 1


def test_same_client_request_id_and_body_returns_the_same_job(
    client: TestClient, engine: Engine
) -> None:
    first = client.post("/openapi/jobs", json=body(clientRequestId="r-1"))
    again = client.post("/openapi/jobs", json=body(clientRequestId="r-1"))
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json() == {"jobId": first.json()["jobId"], "status": "WAITING"}
    assert again.headers["location"] == first.headers["location"]
    assert job_count(engine) == 1


def test_same_client_request_id_with_other_body_is_422_and_writes_nothing(
    client: TestClient, engine: Engine
) -> None:
    first = client.post("/openapi/jobs", json=body(clientRequestId="r-2"))
    clash = client.post("/openapi/jobs", json=body(clientRequestId="r-2", params={"a": 2}))
    assert clash.status_code == 422
    assert "different body" in clash.json()["detail"]
    assert clash.json()["jobId"] == first.json()["jobId"]
    assert job_count(engine) == 1


def test_idempotency_key_header_acts_as_client_request_id(client: TestClient) -> None:
    first = client.post("/openapi/jobs", json=body(), headers={"Idempotency-Key": "k-1"})
    again = client.post("/openapi/jobs", json=body(), headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["jobId"] == first.json()["jobId"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (body(jobHandler="no.such"), "jobHandler"),
        (body(cronExpr="*/5 * *"), "cronExpr"),
        (body(cronExpr="99 * * * *"), "cronExpr"),
        (body(params={"blob": "x" * (64 * 1024)}), "params"),
        (body(callbackUrl="ftp://example.com/hook"), "callbackUrl"),
        (body(callbackUrl="not a url"), "callbackUrl"),
        (body(triggerAt="next tuesday"), "triggerAt"),
        ({"jobHandler": "demo.echo"}, "jobName"),
        (body(jobName=5), "jobName"),
        (body(params=[1, 2]), "params"),
        (body(unknown=1), "unknown"),
    ],
)
def test_bad_input_is_a_clear_4xx_and_writes_nothing(
    client: TestClient, engine: Engine, payload: dict[str, Any], field: str
) -> None:
    response = client.post("/openapi/jobs", json=payload)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert field in problem["detail"] or field in str(problem.get("errors"))
    assert job_count(engine) == 0


def test_unknown_job_is_404(client: TestClient) -> None:
    assert client.get("/openapi/jobs/987654").status_code == 404
    assert client.get("/openapi/jobs/987654/executions").status_code == 404


def test_missing_or_wrong_api_key_is_401(client: TestClient) -> None:
    assert (
        client.post("/openapi/jobs", json=body(), headers={"Authorization": ""}).status_code == 401
    )
    wrong = client.get("/openapi/jobs/1", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


def test_an_app_sees_only_its_own_jobs(client: TestClient, engine: Engine) -> None:
    job_id = client.post("/openapi/jobs", json=body()).json()["jobId"]
    other = make_app(engine, "other")
    response = client.get(
        f"/openapi/jobs/{job_id}", headers={"Authorization": f"Bearer {other.api_key}"}
    )
    assert response.status_code == 404


def test_cron_job_first_fires_at_next_cron_time(client: TestClient) -> None:
    job_id = client.post("/openapi/jobs", json=body(cronExpr="0 0 1 1 *")).json()["jobId"]
    job = client.get(f"/openapi/jobs/{job_id}").json()
    assert job["nextTriggerTime"].endswith("-01-01T00:00:00.000Z")


def test_trigger_at_accepts_iso_and_epoch_ms(client: TestClient) -> None:
    iso = client.post("/openapi/jobs", json=body(triggerAt="2030-01-02T03:04:05Z")).json()
    epoch = client.post("/openapi/jobs", json=body(triggerAt=1893553445000)).json()
    assert client.get(f"/openapi/jobs/{iso['jobId']}").json()["nextTriggerTime"] == (
        "2030-01-02T03:04:05.000Z"
    )
    assert client.get(f"/openapi/jobs/{epoch['jobId']}").json()["nextTriggerTime"] == (
        "2030-01-02T03:04:05.000Z"
    )


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["ready"] is True


def test_openapi_document_names_the_operations(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operations = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert {"createJob", "getJob", "listJobExecutions"} <= operations


def test_mysql_not_answering_is_a_503_problem_with_retry_after(namespace: StoreSettings) -> None:
    from services.api.app import create_app

    settings = ApiSettings(
        namespace=namespace.namespace, database_url="mysql+pymysql://root@127.0.0.1:1"
    )
    with TestClient(create_app(settings)) as client:
        response = client.post(
            "/openapi/jobs",
            json={"jobName": "j", "jobHandler": "demo.noop"},
            headers={"Authorization": "Bearer some-key"},
        )
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "1"
    assert response.json()["detail"].startswith("MySQL is unavailable")
    assert "127.0.0.1" not in response.text and "Can't connect" not in response.text


def test_params_with_nan_or_infinity_are_a_422_and_write_nothing(
    client: TestClient, engine: Engine
) -> None:
    for number in ("NaN", "Infinity", "-Infinity"):
        raw = '{"jobName":"r","jobHandler":"demo.echo","params":{"x":' + number + "}}"
        response = client.post(
            "/openapi/jobs", content=raw, headers={"content-type": "application/json"}
        )
        assert response.status_code == 422, response.text
        assert "NaN or Infinity" in response.text
    assert job_count(engine) == 0
