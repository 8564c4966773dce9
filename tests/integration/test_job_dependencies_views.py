"""Job dependencies where people read them: GET /openapi/executions/{id} shows
``waitedFor``, the console's job page names the parents and what each run waited for,
and ``kairos jobs show`` (text and JSON) says both."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.states import ExecutionStatus
from tests.integration.console_helpers import make_operator, sign_in
from tests.integration.control_helpers import add_execution, create


def _child_with_a_run(client: TestClient, engine: Engine) -> tuple[int, int, str]:
    """A parent, and a child after it whose run waited for the parent's run e-parent."""
    parent = create(client)
    child = create(client, after=[{"jobId": parent, "on": "FINISHED"}])
    run = add_execution(engine, child, ExecutionStatus.SKIPPED, 1_000)
    waited = json.dumps([{"jobId": parent, "executionId": "e-parent", "status": "FAILED"}])
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE executions SET waited_for = :w WHERE execution_id = :e"),
            {"w": waited, "e": run},
        )
    return parent, child, run


def test_the_api_shows_what_a_run_waited_for(client: TestClient, engine: Engine) -> None:
    parent, _, run = _child_with_a_run(client, engine)
    shown = client.get(f"/openapi/executions/{run}").json()
    assert shown["waitedFor"] == [{"jobId": parent, "executionId": "e-parent", "status": "FAILED"}]


def test_the_console_job_page_names_parents_and_waits(client: TestClient, engine: Engine) -> None:
    parent, child, _ = _child_with_a_run(client, engine)
    sign_in(client, make_operator(engine))
    page = client.get(f"/console/jobs/{child}").text
    assert f'<a href="/console/jobs/{parent}">#{parent}</a> <small>FINISHED</small>' in page
    assert "waited for" in page and "<code>e-parent</code> FAILED" in page
    assert "none: its runs wait for no other job" in client.get(f"/console/jobs/{parent}").text


def test_jobs_show_says_the_parents_and_the_last_wait(
    cli: Any, client: TestClient, engine: Engine
) -> None:
    parent, child, _ = _child_with_a_run(client, engine)
    status, out, _ = cli("jobs", "show", str(child))
    assert status == 0
    assert f"job {parent} (FINISHED)" in out
    assert f"last run waited for job {parent} run e-parent FAILED" in out
    status, out, _ = cli("jobs", "show", str(child), "-o", "json")
    shown = json.loads(out)
    assert shown["after"] == [{"jobId": parent, "on": "FINISHED"}]
    assert shown["executions"][0]["waitedFor"][0]["executionId"] == "e-parent"
