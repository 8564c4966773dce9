"""Run logs in MySQL: written by the worker's writer, paged by the API for the app that
owns the execution only, deleted by retention with their executions."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.executions import NewExecution, insert_executions
from common.db.retention import prune_executions
from common.states import ExecutionStatus
from services.worker.log_writer import RunLogWriter, mysql_store
from services.worker.run_logs import LogLine
from tests.integration.console_helpers import make_operator, sign_in
from tests.integration.helpers import make_app

FAR = "2100-01-01T00:00:00Z"


def job(client: TestClient) -> int:
    created = client.post(
        "/openapi/jobs", json={"jobName": "j", "jobHandler": "demo.noop", "triggerAt": FAR}
    )
    assert created.status_code == 202, created.text
    job_id: int = created.json()["jobId"]
    return job_id


def add_execution(
    engine: Engine, job_id: int, status: ExecutionStatus, attempt: int = 1, at: int = 100
) -> str:
    execution_id = str(uuid.uuid4())
    with engine.begin() as conn:
        insert_executions(conn, [NewExecution(execution_id, job_id, attempt, at, at, status)], at)
    return execution_id


def write_lines(engine: Engine, execution_id: str, count: int) -> None:
    writer = RunLogWriter(mysql_store(engine), 1_000_000)
    run_log = writer.open(execution_id)
    assert run_log is not None
    for n in range(count):
        run_log.append("INFO", f"{execution_id[:8]} line {n}", at_ms=1_800_000_000_000 + n)
    run_log.close()
    assert writer.write_once() == count


def log_rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT execution_id, COUNT(*) AS n FROM execution_logs GROUP BY execution_id")
        )
        return {str(r.execution_id): int(r.n) for r in rows}


def test_logs_page_by_seq_in_order_and_say_when_the_run_ended(
    client: TestClient, engine: Engine
) -> None:
    ended = add_execution(engine, job(client), ExecutionStatus.SUCCEEDED)
    running = add_execution(engine, job(client), ExecutionStatus.QUEUED)
    write_lines(engine, ended, 25)
    write_lines(engine, running, 3)
    seen: list[str] = []
    after = 0
    while True:
        page = client.get(f"/openapi/executions/{ended}/logs?after={after}&limit=10").json()
        assert page["executionId"] == ended and page["status"] == "SUCCEEDED" and page["ended"]
        if not page["lines"]:
            assert page["nextAfter"] == after
            break
        assert [x["seq"] for x in page["lines"]] == list(range(after + 1, page["nextAfter"] + 1))
        seen += [x["line"] for x in page["lines"]]
        after = page["nextAfter"]
    assert seen == [f"{ended[:8]} line {n}" for n in range(25)]
    first = client.get(f"/openapi/executions/{ended}/logs?limit=1").json()["lines"][0]
    assert first == {
        "seq": 1,
        "at": "2027-01-15T08:00:00.000Z",
        "level": "INFO",
        "line": f"{ended[:8]} line 0",
    }
    following = client.get(f"/openapi/executions/{running}/logs").json()
    assert len(following["lines"]) == 3 and following["ended"] is False


def test_a_run_with_no_lines_has_an_empty_log(client: TestClient, engine: Engine) -> None:
    quiet = add_execution(engine, job(client), ExecutionStatus.SUCCEEDED)
    page = client.get(f"/openapi/executions/{quiet}/logs").json()
    assert page["lines"] == [] and page["nextAfter"] == 0 and page["ended"]


def test_an_app_cannot_read_another_apps_run_log(client: TestClient, engine: Engine) -> None:
    theirs = add_execution(engine, job(client), ExecutionStatus.SUCCEEDED)
    write_lines(engine, theirs, 2)
    other = make_app(engine, "other")
    response = client.get(
        f"/openapi/executions/{theirs}/logs",
        headers={"Authorization": f"Bearer {other.api_key}"},
    )
    assert response.status_code == 404
    assert theirs not in response.text or "does not exist" in response.text
    missing = client.get(f"/openapi/executions/{uuid.uuid4()}/logs")
    assert missing.status_code == 404


def test_bad_paging_is_a_422_naming_the_field(client: TestClient, engine: Engine) -> None:
    execution_id = add_execution(engine, job(client), ExecutionStatus.SUCCEEDED)
    for query, field in (("after=-1", "after"), ("limit=0", "limit"), ("limit=1001", "limit")):
        response = client.get(f"/openapi/executions/{execution_id}/logs?{query}")
        assert response.status_code == 422, query
        assert field in response.text
    assert client.get("/openapi/executions/not-a-uuid/logs").status_code == 422


def test_lines_written_twice_are_stored_once(engine: Engine, client: TestClient) -> None:
    execution_id = add_execution(engine, job(client), ExecutionStatus.SUCCEEDED)
    line = LogLine(execution_id, 1, 5, "INFO", "once")
    store = mysql_store(engine)
    store([line])
    store([line, LogLine(execution_id, 2, 6, "ERROR", "twice")])
    assert log_rows(engine) == {execution_id: 2}


def test_retention_deletes_logs_with_their_executions(client: TestClient, engine: Engine) -> None:
    job_id = job(client)
    old = add_execution(engine, job_id, ExecutionStatus.SUCCEEDED, attempt=1, at=100)
    young = add_execution(engine, job_id, ExecutionStatus.SUCCEEDED, attempt=2, at=5_000)
    waiting = add_execution(engine, job_id, ExecutionStatus.QUEUED, attempt=3, at=100)
    for execution_id in (old, young, waiting):
        write_lines(engine, execution_id, 4)
    with engine.begin() as conn:
        assert prune_executions(conn, 1_000, limit=10) == 1
    assert log_rows(engine) == {young: 4, waiting: 4}


def test_the_console_run_view_shows_the_log_and_follows_a_running_run(
    namespace: StoreSettings, client: TestClient, engine: Engine
) -> None:
    from services.api.app import create_app

    job_id = job(client)
    running = add_execution(engine, job_id, ExecutionStatus.QUEUED, attempt=1)
    ended = add_execution(engine, job_id, ExecutionStatus.SUCCEEDED, attempt=2)
    write_lines(engine, running, 2)
    write_lines(engine, ended, 3)
    with TestClient(create_app(ApiSettings(namespace=namespace.namespace))) as console:
        sign_in(console, make_operator(engine))
        following = console.get(f"/console/executions/{running}")
        assert following.status_code == 200
        assert 'http-equiv="refresh"' in following.text
        assert f"{running[:8]} line 1" in following.text
        done = console.get(f"/console/executions/{ended}").text
        assert 'http-equiv="refresh"' not in done and f"{ended[:8]} line 2" in done
        assert f'href="/console/executions/{ended}"' in console.get(f"/console/jobs/{job_id}").text
        assert console.get(f"/console/executions/{uuid.uuid4()}").status_code == 404
        assert console.get("/console/executions/stuck").status_code == 200
