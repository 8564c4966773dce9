"""Idempotency keys as the IETF draft has them: the header plain or as a structured
field, compared exactly, honoured on create, batch and trigger; a replay answers as the
first request did and says so."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials

BATCH = "/openapi/jobs/batch"


def body(name: str = "report", **extra: Any) -> dict[str, Any]:
    return {
        "jobName": name,
        "jobHandler": "demo.echo",
        "triggerAt": "2100-01-01T00:00:00Z",
        **extra,
    }


def count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


def test_the_quoted_and_the_plain_header_name_the_same_key(
    client: TestClient, engine: Engine
) -> None:
    first = client.post("/openapi/jobs", json=body(), headers={"Idempotency-Key": '"k-1"'})
    again = client.post("/openapi/jobs", json=body(), headers={"Idempotency-Key": "k-1"})
    escaped = client.post("/openapi/jobs", json=body(), headers={"Idempotency-Key": '"a\\"b"'})
    assert first.status_code == again.status_code == escaped.status_code == 202
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert client.get(f"/openapi/jobs/{escaped.json()['jobId']}").json()["clientRequestId"] == 'a"b'
    assert count(engine, "jobs") == 2


@pytest.mark.parametrize("value", ['"open', '"a"b', '"\\n"', '""', "x" * 129, "é"])
def test_a_malformed_header_is_a_422_naming_it_and_writes_nothing(
    client: TestClient, engine: Engine, value: str
) -> None:
    response = client.post(
        "/openapi/jobs", json=body(), headers={b"Idempotency-Key": value.encode()}
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "Idempotency-Key"
    assert count(engine, "jobs") == 0


def test_keys_compare_exactly(client: TestClient, engine: Engine) -> None:
    keys = ["Report-1", "report-1", "report-1 ", "repórt-1"]
    ids = [
        client.post("/openapi/jobs", json=body(clientRequestId=key)).json()["jobId"] for key in keys
    ]
    assert len(set(ids)) == len(keys)
    again = client.post("/openapi/jobs", json=body(clientRequestId="report-1 "))
    assert again.json()["jobId"] == ids[2]


def test_a_deleted_jobs_key_replays_the_first_answer_and_makes_no_job(
    client: TestClient, engine: Engine
) -> None:
    first = client.post("/openapi/jobs", json=body(), headers={"Idempotency-Key": "gone-1"})
    job_id = first.json()["jobId"]
    assert client.delete(f"/openapi/jobs/{job_id}").status_code == 204
    again = client.post("/openapi/jobs", json=body(), headers={"Idempotency-Key": "gone-1"})
    assert (again.status_code, again.json()) == (202, {"jobId": job_id, "status": "WAITING"})
    assert again.headers["idempotent-replayed"] == "true"
    assert client.get(f"/openapi/jobs/{job_id}").status_code == 404
    assert count(engine, "jobs") == 1


def test_a_keyed_batch_replays_its_whole_answer(client: TestClient, engine: Engine) -> None:
    jobs = {"jobs": [body("a"), body("b")]}
    first = client.post(BATCH, json=jobs, headers={"Idempotency-Key": "batch-1"})
    again = client.post(BATCH, json=jobs, headers={"Idempotency-Key": '"batch-1"'})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert count(engine, "jobs") == 2


def test_a_batch_key_reused_for_another_batch_is_a_conflict_and_writes_nothing(
    client: TestClient, engine: Engine
) -> None:
    client.post(BATCH, json={"jobs": [body("a")]}, headers={"Idempotency-Key": "batch-2"})
    other = client.post(BATCH, json={"jobs": [body("z")]}, headers={"Idempotency-Key": "batch-2"})
    assert other.status_code == 422
    assert other.json()["type"] == "urn:kairos:problem:idempotency-conflict"
    assert count(engine, "jobs") == 1


def job(client: TestClient) -> int:
    job_id: int = client.post("/openapi/jobs", json=body()).json()["jobId"]
    return job_id


def test_a_retried_trigger_runs_once(client: TestClient, engine: Engine) -> None:
    job_id = job(client)
    url = f"/openapi/jobs/{job_id}/trigger"
    first = client.post(url, headers={"Idempotency-Key": "run-1"})
    again = client.post(url, headers={"Idempotency-Key": "run-1"})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert first.headers["location"] == f"/openapi/executions/{first.json()['executionId']}"
    assert again.headers["idempotent-replayed"] == "true"
    assert count(engine, "executions") == 1
    other = client.post(url, headers={"Idempotency-Key": "run-2"})
    assert other.json()["executionId"] != first.json()["executionId"]
    assert count(engine, "executions") == 2


def test_concurrent_triggers_with_one_key_make_one_execution(
    client: TestClient, engine: Engine
) -> None:
    job_id = job(client)
    start = threading.Barrier(6)
    answers: list[Any] = []

    def trigger() -> None:
        start.wait()
        response = client.post(
            f"/openapi/jobs/{job_id}/trigger", headers={"Idempotency-Key": "same"}
        )
        answers.append((response.status_code, response.json()))

    threads = [threading.Thread(target=trigger) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert {status for status, _ in answers} == {202}
    assert len({answer["executionId"] for _, answer in answers}) == 1
    assert count(engine, "executions") == 1


def test_a_trigger_key_used_for_another_job_is_a_conflict(client: TestClient) -> None:
    one, two = job(client), job(client)
    client.post(f"/openapi/jobs/{one}/trigger", headers={"Idempotency-Key": "t"})
    other = client.post(f"/openapi/jobs/{two}/trigger", headers={"Idempotency-Key": "t"})
    assert other.status_code == 422
    assert other.json()["type"] == "urn:kairos:problem:idempotency-conflict"


def test_a_trigger_refused_stores_no_key(client: TestClient, engine: Engine) -> None:
    job_id = job(client)
    client.post(f"/openapi/jobs/{job_id}/cancel")
    refused = client.post(f"/openapi/jobs/{job_id}/trigger", headers={"Idempotency-Key": "r"})
    assert refused.status_code == 409
    assert count(engine, "idempotency_keys") == 0


def test_an_expired_key_runs_anew(
    namespace: StoreSettings, app_credentials: AppCredentials, engine: Engine
) -> None:
    from services.api.app import create_app

    # 3.6 ms: expired by the time the second request comes.
    settings = ApiSettings(namespace=namespace.namespace, idempotency_key_hours=0.000001)
    with TestClient(create_app(settings)) as client:
        client.headers["Authorization"] = f"Bearer {app_credentials.api_key}"
        job_id = job(client)
        url = f"/openapi/jobs/{job_id}/trigger"
        first = client.post(url, headers={"Idempotency-Key": "short"}).json()
        time.sleep(0.05)
        again = client.post(url, headers={"Idempotency-Key": "short"})
    assert "idempotent-replayed" not in again.headers
    assert again.json()["executionId"] != first["executionId"]
    assert count(engine, "executions") == 2
