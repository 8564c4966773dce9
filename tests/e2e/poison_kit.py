"""What the poison suite works with: two tenants on one stack, rows written as an older
Kairos would have stored them, and the checks every case ends with."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.jobs import NewJob, insert_job
from tests.books import Expectation, assert_books
from tests.e2e.harness import Api, Processes, wait_until

REPO = Path(__file__).resolve().parents[2]
POISON_HANDLERS = "services.worker.demo,tests.e2e.poison_handlers"
# How long app B's work may take, whatever app A sends. An ordinary job runs and calls
# back within a few seconds here; what the suite guards against held B for good, or for
# as long as the poison lasted.
BOUND = 45.0


@dataclass
class Tenant:
    """An app, through the API and by its row in MySQL."""

    api: Api
    pk: int

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """POST to the API as this app."""
        headers = {"Authorization": f"Bearer {self.api.api_key}", **kwargs.pop("headers", {})}
        return httpx.post(f"{self.api.base}{path}", headers=headers, timeout=30, **kwargs)

    def get(self, path: str) -> httpx.Response:
        """GET from the API as this app."""
        headers = {"Authorization": f"Bearer {self.api.api_key}"}
        return httpx.get(f"{self.api.base}{path}", headers=headers, timeout=30)

    def post_raw(self, raw: str) -> httpx.Response:
        """POST /openapi/jobs with a body written by hand (what ``json=`` cannot send)."""
        return self.post(
            "/openapi/jobs", content=raw.encode(), headers={"content-type": "application/json"}
        )

    def create(self, body: dict[str, Any]) -> int:
        """Create a job that must be accepted; its id."""
        response = self.api.post_job(body)
        assert response.status_code == 202, (body.get("jobName"), response.text)
        return int(response.json()["jobId"])


def tenant(processes: Processes, engine: Engine, base: str, name: str) -> Tenant:
    """A new app, created with the CLI as an operator would."""
    created = json.loads(processes.run("app", "create", name, "--handlers", "*"))
    with engine.connect() as conn:
        pk = conn.execute(
            sa.text("SELECT id FROM apps WHERE app_id = :a"), {"a": created["appId"]}
        ).scalar_one()
    return Tenant(Api(base, created["apiKey"], created["signingSecret"]), int(pk))


def job_count(engine: Engine, app: Tenant) -> int:
    """How many jobs the app has in MySQL."""
    with engine.connect() as conn:
        count = conn.execute(
            sa.text("SELECT COUNT(*) FROM jobs WHERE app_pk = :a"), {"a": app.pk}
        ).scalar_one()
    return int(count)


def assert_refused(response: httpx.Response, field: str) -> None:
    """A 422 problem whose errors name ``field``."""
    assert response.status_code == 422, (field, response.status_code, response.text[:500])
    named = [error.get("field") for error in response.json().get("errors") or []]
    assert field in named, (field, response.json())


def stored_job(engine: Engine, app: Tenant, name: str, trigger: int, **columns: Any) -> int:
    """A job row as an older Kairos could have stored it: inserted, then ``columns`` set
    as they are, past what today's API would take."""
    job = NewJob(app.pk, name, "demo.echo", {}, None, trigger, None, None, None)
    with engine.begin() as conn:
        job_id = insert_job(conn, job, int(time.time() * 1000))
        if columns:
            assignments = ", ".join(f"{name} = :{name}" for name in columns)
            conn.execute(
                sa.text(f"UPDATE jobs SET {assignments} WHERE id = :id"), {**columns, "id": job_id}
            )
    return job_id


def executions(engine: Engine, job_id: int) -> list[dict[str, Any]]:
    """A job's execution rows, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT execution_id, attempt, status, message, result, manual, trigger_time "
                "FROM executions WHERE job_id = :j ORDER BY id"
            ),
            {"j": job_id},
        ).all()
    return [dict(row._mapping) for row in rows]


def deliveries(engine: Engine, job_ids: list[int]) -> list[dict[str, Any]]:
    """The callback deliveries of these jobs."""
    statement = sa.text(
        "SELECT job_id, url, status, attempts, last_status_code, last_error "
        "FROM callback_deliveries WHERE job_id IN :ids"
    ).bindparams(sa.bindparam("ids", expanding=True))
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(statement, {"ids": job_ids})]


def job_status(engine: Engine, job_id: int) -> str:
    """The job's status in MySQL."""
    with engine.connect() as conn:
        return str(
            conn.execute(sa.text("SELECT status FROM jobs WHERE id = :j"), {"j": job_id}).scalar()
        )


def settle(engine: Engine, job_id: int, timeout: float = BOUND) -> dict[str, Any]:
    """Wait for the job to end; its last execution."""
    wait_until(
        lambda: job_status(engine, job_id) in {"SUCCEEDED", "FAILED", "CANCELLED"},
        timeout,
        what=f"job {job_id} to end",
    )
    return executions(engine, job_id)[-1]


def shown_whole(app: Tenant, job_ids: list[int]) -> None:
    """Every job and its executions are shown by the API (no 5xx, whatever they hold)."""
    for job_id in job_ids:
        for path in (f"/openapi/jobs/{job_id}?preview=5", f"/openapi/jobs/{job_id}/executions"):
            response = app.get(path)
            assert response.status_code == 200, (path, response.status_code, response.text[:300])


def cancel(app: Tenant, job_ids: list[int]) -> None:
    """Cancel jobs that would go on for good (crons, held work)."""
    for job_id in job_ids:
        response = app.post(f"/openapi/jobs/{job_id}/cancel")
        assert response.status_code == 200, response.text


def books_of_b(engine: Engine, job_ids: list[int]) -> None:
    """Every job of B succeeded and its callback was delivered."""
    assert_books(engine, Expectation(job_ids), timeout=BOUND)


def books_of_a(engine: Engine, job_ids: list[int]) -> None:
    """Every job of A ended, each execution final and each callback settled."""
    statuses = {"SUCCEEDED", "FAILED", "CANCELLED"}
    assert_books(engine, Expectation(job_ids, statuses, callbacks="settled"), timeout=BOUND)
