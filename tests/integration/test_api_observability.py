"""The API's own observability: requests counted by route template and status, a
Request-Id on every answer, and that id on the log lines written while serving it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from common.logs import JsonFormatter
from common.metrics import exposition


def served(method: str, route: str, status: int) -> float:
    labels = {"method": method, "route": route, "status": str(status)}
    return REGISTRY.get_sample_value("kairos_api_requests_total", labels) or 0.0


def timed(method: str, route: str) -> float:
    labels = {"method": method, "route": route}
    return REGISTRY.get_sample_value("kairos_api_request_duration_seconds_count", labels) or 0.0


def test_requests_are_counted_by_route_template_and_status(client: TestClient) -> None:
    before = {
        "found": served("GET", "/openapi/jobs/{jobId}", 200),
        "missing": served("GET", "/openapi/jobs/{jobId}", 404),
        "large": served("POST", "/openapi/jobs", 413),
        "nowhere": served("GET", "<unmatched>", 404),
        "timed": timed("GET", "/openapi/jobs/{jobId}"),
    }
    job = client.post("/openapi/jobs", json={"jobName": "a", "jobHandler": "demo.noop"})
    job_id = job.json()["jobId"]
    assert client.get(f"/openapi/jobs/{job_id}").status_code == 200
    assert client.get("/openapi/jobs/987654321").status_code == 404
    huge = client.post("/openapi/jobs", content=b"{" + b" " * 2_000_000 + b"}")
    assert huge.status_code == 413
    assert client.get("/no/such/path/4711").status_code == 404

    assert served("GET", "/openapi/jobs/{jobId}", 200) == before["found"] + 1
    assert served("GET", "/openapi/jobs/{jobId}", 404) == before["missing"] + 1
    assert served("POST", "/openapi/jobs", 413) == before["large"] + 1
    assert served("GET", "<unmatched>", 404) == before["nowhere"] + 1
    assert timed("GET", "/openapi/jobs/{jobId}") == before["timed"] + 2
    exposed = exposition().decode()
    assert "/no/such/path/4711" not in exposed and f'/openapi/jobs/{job_id}"' not in exposed


def test_every_answer_carries_a_request_id(client: TestClient) -> None:
    answers = [
        client.get("/healthz"),
        client.get("/openapi/jobs/987654321"),
        client.post("/openapi/jobs", content=b"{" + b" " * 2_000_000 + b"}"),
        client.get("/nowhere"),
        client.get("/console/", follow_redirects=False),
    ]
    ids = [a.headers.get("request-id") for a in answers]
    assert all(ids) and len(set(ids)) == len(ids), ids
    kept = client.get("/healthz", headers={"Request-Id": "lb-7f3a:42"})
    assert kept.headers["request-id"] == "lb-7f3a:42"
    replaced = client.get("/healthz", headers={"Request-Id": "no spaces <allowed>"})
    assert replaced.headers["request-id"] not in ("", "no spaces <allowed>")


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The root logger's lines as the API writes them with KAIROS_LOG_JSON."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("api"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def test_log_lines_written_while_serving_carry_the_request_id(
    client: TestClient, json_lines: io.StringIO
) -> None:
    job = client.post("/openapi/jobs", json={"jobName": "a", "jobHandler": "demo.noop"})
    job_id = job.json()["jobId"]
    answer = client.post(f"/openapi/jobs/{job_id}/pause")
    assert answer.status_code == 200
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    (paused,) = [line for line in lines if line["msg"] == "job paused"]
    assert paused["request_id"] == answer.headers["request-id"]
    assert paused["job_id"] == job_id and paused["service"] == "api"
    assert paused["ts"].endswith("Z") and paused["ts"][10] == "T"
    outside = [line for line in lines if line["msg"] != "job paused"]
    assert all(line.get("request_id") != paused["request_id"] for line in outside)
