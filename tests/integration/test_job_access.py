"""Job control and apps, keys and documentation: another app can neither see nor change a
job, every control operation needs the API key, and the OpenAPI document names them."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from tests.integration.control_helpers import (
    create,
    executions_of,
    job_row,
)
from tests.integration.helpers import make_app


def test_another_app_can_neither_see_nor_change_a_job(client: TestClient, engine: Engine) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    before = job_row(engine, job_id)
    other = {"Authorization": f"Bearer {make_app(engine, 'other').api_key}"}
    for action in ("pause", "resume", "trigger", "cancel"):
        assert client.post(f"/openapi/jobs/{job_id}/{action}", headers=other).status_code == 404
    patched = client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "x"}, headers=other)
    assert patched.status_code == 404
    assert client.delete(f"/openapi/jobs/{job_id}", headers=other).status_code == 404
    assert client.get("/openapi/jobs", headers=other).json() == {"jobs": [], "nextCursor": None}
    assert [j["jobId"] for j in client.get("/openapi/jobs").json()["jobs"]] == [job_id]
    assert job_row(engine, job_id) == before
    assert executions_of(engine, job_id) == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/openapi/jobs"),
        ("POST", "/openapi/jobs/1/pause"),
        ("POST", "/openapi/jobs/1/resume"),
        ("POST", "/openapi/jobs/1/trigger"),
        ("POST", "/openapi/jobs/1/cancel"),
        ("PATCH", "/openapi/jobs/1"),
        ("DELETE", "/openapi/jobs/1"),
    ],
)
def test_control_needs_the_api_key(client: TestClient, method: str, path: str) -> None:
    kwargs: dict[str, Any] = {"json": {}} if method == "PATCH" else {}
    response = client.request(method, path, headers={"Authorization": "Bearer nope"}, **kwargs)
    assert response.status_code == 401


def test_openapi_document_names_the_control_operations(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operations = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    expected = {"listJobs", "pauseJob", "resumeJob", "triggerJob", "cancelJob", "updateJob"}
    assert expected | {"deleteJob", "getJob", "createJob"} <= operations
