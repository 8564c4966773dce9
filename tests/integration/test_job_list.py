"""Listing jobs through the OpenAPI on real MySQL: pages, filters, the last execution,
bad queries refused, and the index the query scans."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.job_control import JobFilter, list_query
from common.states import ExecutionStatus, JobStatus
from tests.integration.control_helpers import (
    FUTURE,
    add_execution,
    create,
)


def test_list_pages_newest_first_with_a_cursor(client: TestClient) -> None:
    created = [create(client, jobName=f"job {i}", triggerAt=FUTURE) for i in range(7)]
    pages: list[list[int]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor is not None:
            params["cursor"] = cursor
        answer = client.get("/openapi/jobs", params=params).json()
        pages.append([job["jobId"] for job in answer["jobs"]])
        cursor = answer["nextCursor"]
        if cursor is None:
            break
        assert len(pages) < 5
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [j for page in pages for j in page] == sorted(created, reverse=True)


def test_a_last_full_page_has_no_next_cursor(client: TestClient) -> None:
    for _ in range(6):
        create(client, triggerAt=FUTURE)
    first = client.get("/openapi/jobs", params={"limit": 3}).json()
    second = client.get("/openapi/jobs", params={"limit": 3, "cursor": first["nextCursor"]})
    assert len(second.json()["jobs"]) == 3
    assert second.json()["nextCursor"] is None


def test_list_filters_by_status_handler_and_name_prefix(client: TestClient, engine: Engine) -> None:
    names = ["a%b", "axb", "a_c", "abc", "b%"]
    ids = {name: create(client, jobName=name, triggerAt=FUTURE) for name in names}
    failing = create(client, jobName="zz", jobHandler="demo.fail", triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{ids['abc']}/pause")

    def listed(**params: Any) -> list[int]:
        response = client.get("/openapi/jobs", params=params)
        assert response.status_code == 200, response.text
        return [job["jobId"] for job in response.json()["jobs"]]

    assert listed(namePrefix="a%") == [ids["a%b"]]
    assert listed(namePrefix="a_") == [ids["a_c"]]
    assert listed(namePrefix="a") == sorted([ids[n] for n in names[:4]], reverse=True)
    assert listed(status="PAUSED") == [ids["abc"]]
    assert listed(handler="demo.fail") == [failing]
    assert listed(handler="demo.fail", status="PAUSED") == []
    assert listed(status="WAITING", namePrefix="a", limit=1) == [ids["a_c"]]


def test_list_items_carry_the_last_execution_and_the_shown_status(
    client: TestClient, engine: Engine
) -> None:
    busy = create(client, fixedRateSeconds=60, triggerAt=FUTURE)
    idle = create(client, triggerAt=FUTURE)
    add_execution(engine, busy, ExecutionStatus.SUCCEEDED, 1)
    newest = add_execution(engine, busy, ExecutionStatus.QUEUED, 2)
    jobs = {job["jobId"]: job for job in client.get("/openapi/jobs").json()["jobs"]}
    assert jobs[busy]["lastExecution"]["executionId"] == newest
    assert jobs[busy]["status"] == "RUNNING"
    assert jobs[idle]["lastExecution"] is None
    assert jobs[idle]["status"] == "WAITING"
    assert jobs[busy] == client.get(f"/openapi/jobs/{busy}").json()


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cursor": "!!!"}, "cursor"),
        ({"cursor": b64("abc")}, "cursor"),
        ({"cursor": b64("0")}, "cursor"),
        ({"cursor": b64("-5")}, "cursor"),
        ({"cursor": b64("12")}, "cursor"),  # padded: not what the API hands out
        ({"cursor": "x" * 65}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"status": "DONE"}, "status"),
    ],
)
def test_list_refuses_a_bad_query(client: TestClient, params: dict[str, Any], field: str) -> None:
    response = client.get("/openapi/jobs", params=params)
    assert response.status_code == 422
    assert field in response.json()["detail"]


def test_list_scans_the_app_id_index(engine: Engine) -> None:
    query = list_query(1, JobFilter(JobStatus.WAITING, "demo.echo", "a"), 100, 51)
    compiled = query.compile(dialect=engine.dialect)
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params).mappings().all()
    assert [row["key"] for row in plan] == ["ix_jobs_app_pk_id"]
