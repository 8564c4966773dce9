"""Every error is an RFC 9457 problem detail: a stable ``type``, the request id in
``instance`` and in ``Request-Id``, no host or driver text, Allow on a 405."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from common.config import ApiSettings, StoreSettings
from services.api.problem_types import ProblemType

PROBLEM_JSON = "application/problem+json"
README = Path(__file__).resolve().parents[2] / "README.md"


def assert_problem(response: object, status: int, name: str) -> dict[str, object]:
    assert hasattr(response, "status_code") and hasattr(response, "headers")
    assert response.status_code == status, getattr(response, "text", "")
    assert response.headers["content-type"] == PROBLEM_JSON
    body: dict[str, object] = response.json()  # type: ignore[attr-defined]
    assert body["type"] == f"urn:kairos:problem:{name}"
    assert body["status"] == status
    assert body["instance"] == f"urn:kairos:request:{response.headers['request-id']}"
    return body


def test_an_unknown_path_is_a_not_found_problem(client: TestClient) -> None:
    body = assert_problem(client.get("/openapi/nothing-here"), 404, "not-found")
    assert "/openapi.json" in str(body["detail"])


def test_a_job_not_found_names_the_job(client: TestClient) -> None:
    body = assert_problem(client.get("/openapi/jobs/4242"), 404, "job-not-found")
    assert body["jobId"] == 4242


def test_a_405_allows_every_method_of_the_path_across_routers(client: TestClient) -> None:
    response = client.put("/openapi/jobs/1", json={})
    assert_problem(response, 405, "method-not-allowed")
    assert response.headers["allow"] == "DELETE, GET, PATCH"
    batch = client.patch("/openapi/jobs/batch", json={})
    assert_problem(batch, 405, "method-not-allowed")
    assert batch.headers["allow"] == "POST"


def test_a_crash_is_a_500_problem_without_the_error_text(
    namespace: StoreSettings, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.api import execution_reads

    def broken(*_args: object) -> None:
        raise RuntimeError("secret internals at db-7.internal")

    monkeypatch.setattr(execution_reads, "list_executions", broken)
    created = client.post("/openapi/jobs", json={"jobName": "j", "jobHandler": "demo.noop"})
    response = client.get(f"/openapi/jobs/{created.json()['jobId']}/executions")
    body = assert_problem(response, 500, "internal-error")
    assert "db-7" not in response.text and "RuntimeError" not in response.text
    assert response.headers["request-id"] in str(body["detail"])


def test_a_request_id_the_client_sends_is_kept_and_a_bad_one_replaced(client: TestClient) -> None:
    kept = client.get("/openapi/jobs/1", headers={"Request-Id": "trace-42.a:b"})
    assert kept.headers["request-id"] == "trace-42.a:b"
    assert kept.json()["instance"] == "urn:kairos:request:trace-42.a:b"
    replaced = client.get("/healthz", headers={"Request-Id": "x" * 200})
    assert len(replaced.headers["request-id"]) == 32


def test_a_413_carries_the_request_id(client: TestClient) -> None:
    response = client.post(
        "/openapi/jobs",
        content=b"x" * (2 * 1024 * 1024),
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 413, "body-too-large")


def test_validation_problems_name_each_field(client: TestClient) -> None:
    response = client.post("/openapi/jobs", json={"jobName": "", "jobHandler": "demo.noop"})
    body = assert_problem(response, 422, "validation-failed")
    assert body["errors"] == [
        {"field": "jobName", "message": "String should have at least 1 character"}
    ]


def test_an_invalid_transition_names_the_job_and_its_status(client: TestClient) -> None:
    job_id = client.post("/openapi/jobs", json={"jobName": "j", "jobHandler": "demo.noop"}).json()[
        "jobId"
    ]
    client.post(f"/openapi/jobs/{job_id}/cancel")
    body = assert_problem(client.post(f"/openapi/jobs/{job_id}/resume"), 409, "invalid-transition")
    assert (body["jobId"], body["jobStatus"]) == (job_id, "CANCELLED")


@pytest.fixture
def stores_away(namespace: StoreSettings) -> Iterator[TestClient]:
    """The API with MySQL and Redis pointed at ports nothing listens on."""
    from services.api.app import create_app

    settings = ApiSettings(
        namespace=namespace.namespace,
        database_url="mysql+pymysql://root@127.0.0.1:1",
        redis_url="redis://127.0.0.1:1/0",
    )
    app: FastAPI = create_app(settings)
    with TestClient(app) as client:
        yield client


def test_a_503_and_readyz_name_the_store_never_its_host(stores_away: TestClient) -> None:
    response = stores_away.get("/openapi/jobs", headers={"Authorization": "Bearer k"})
    body = assert_problem(response, 503, "store-unavailable")
    assert response.headers["retry-after"] == "1"
    assert str(body["detail"]).startswith("MySQL is unavailable")
    ready = stores_away.get("/readyz")
    assert ready.status_code == 503
    assert ready.json() == {
        "ready": False,
        "checks": {"mysql": "unavailable", "redis": "unavailable"},
    }
    for text in (response.text, ready.text):
        assert "127.0.0.1" not in text and "refused" not in text.lower()


def test_every_problem_type_is_documented_in_the_readme() -> None:
    readme = README.read_text()
    for problem_type in ProblemType:
        assert f"`{problem_type.kind.uri}`" in readme, problem_type
