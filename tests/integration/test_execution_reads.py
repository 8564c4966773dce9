"""Reads that scale: a job's executions paged by cursor and filtered by status and
time; one execution by its id; Location on every 202."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.executions import NewExecution, insert_executions
from common.states import ExecutionStatus
from tests.integration.helpers import make_app

BASE_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def job(client: TestClient) -> int:
    created = client.post(
        "/openapi/jobs",
        json={"jobName": "j", "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"},
    )
    assert created.headers["location"] == f"/openapi/jobs/{created.json()['jobId']}"
    job_id: int = created.json()["jobId"]
    return job_id


def add_executions(engine: Engine, job_id: int, count: int) -> list[str]:
    """Executions at BASE_MS, BASE_MS + 1 s, ...; every third FAILED, the rest SUCCEEDED."""
    rows = [
        NewExecution(
            str(uuid.uuid4()),
            job_id,
            1,
            BASE_MS + n * 1000,
            BASE_MS + n * 1000,
            ExecutionStatus.FAILED if n % 3 == 0 else ExecutionStatus.SUCCEEDED,
        )
        for n in range(count)
    ]
    with engine.begin() as conn:
        insert_executions(conn, rows, BASE_MS)
    return [row.execution_id for row in rows]


def pages(client: TestClient, url: str) -> list[list[str]]:
    found: list[list[str]] = []
    cursor: str | None = None
    while True:
        response = client.get(url + (f"&cursor={cursor}" if cursor else ""))
        assert response.status_code == 200, response.text
        found.append([e["executionId"] for e in response.json()["executions"]])
        cursor = response.json()["nextCursor"]
        if cursor is None:
            return found


def test_executions_page_by_cursor_newest_first_without_gaps(
    client: TestClient, engine: Engine
) -> None:
    job_id = job(client)
    ids = add_executions(engine, job_id, 23)
    found = pages(client, f"/openapi/jobs/{job_id}/executions?limit=10")
    assert [len(page) for page in found] == [10, 10, 3]
    assert [i for page in found for i in page] == list(reversed(ids))


def test_executions_filter_by_status_and_since(client: TestClient, engine: Engine) -> None:
    job_id = job(client)
    ids = add_executions(engine, job_id, 12)
    url = f"/openapi/jobs/{job_id}/executions?limit=2&status=FAILED"
    failed = [i for page in pages(client, url) for i in page]
    assert failed == [ids[n] for n in (9, 6, 3, 0)]
    since = "2027-01-15T08:00:05Z"
    recent = [
        i
        for page in pages(client, f"/openapi/jobs/{job_id}/executions?limit=3&since={since}")
        for i in page
    ]
    assert recent == list(reversed(ids[5:]))
    both = client.get(
        f"/openapi/jobs/{job_id}/executions?status=FAILED&status=SUCCEEDED&since={BASE_MS + 10_000}"
    )
    assert [e["executionId"] for e in both.json()["executions"]] == [ids[11], ids[10]]


def test_a_bad_cursor_or_since_is_a_422_naming_it(client: TestClient) -> None:
    job_id = job(client)
    for query, field in (("cursor=abc", "cursor"), ("since=yesterday", "since")):
        response = client.get(f"/openapi/jobs/{job_id}/executions?{query}")
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == field


def test_one_execution_is_read_by_its_id_by_its_app_only(
    client: TestClient, engine: Engine
) -> None:
    job_id = job(client)
    triggered = client.post(f"/openapi/jobs/{job_id}/trigger")
    execution_id = triggered.json()["executionId"]
    assert triggered.headers["location"] == f"/openapi/executions/{execution_id}"
    shown = client.get(triggered.headers["location"])
    assert shown.status_code == 200
    view = shown.json()
    assert (view["executionId"], view["jobId"], view["status"], view["manual"]) == (
        execution_id,
        job_id,
        "SCHEDULED",
        True,
    )
    stranger = make_app(engine, "other")
    other = client.get(
        f"/openapi/executions/{execution_id}",
        headers={"Authorization": f"Bearer {stranger.api_key}"},
    )
    assert other.status_code == 404
    assert other.json()["type"] == "urn:kairos:problem:execution-not-found"
    client.delete(f"/openapi/jobs/{job_id}")
    assert client.get(f"/openapi/executions/{execution_id}").status_code == 404
    assert client.get("/openapi/executions/not-a-uuid").status_code == 422


def test_a_page_deep_in_a_long_history_uses_the_unique_key(engine: Engine) -> None:
    with engine.connect() as conn:
        plan = (
            conn.execute(
                sa.text(
                    "EXPLAIN SELECT * FROM executions WHERE job_id = 1 AND (trigger_time < 5 "
                    "OR (trigger_time = 5 AND attempt < 2)) ORDER BY trigger_time DESC, "
                    "attempt DESC LIMIT 51"
                )
            )
            .mappings()
            .all()
        )
    assert plan[0]["key"] == "uq_executions_trigger_attempt"
