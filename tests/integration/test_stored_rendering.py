"""The API renders whatever is stored: a value no JSON response can carry is shown as text."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.jsontext import MAX_JSON_DEPTH

DEEP = "[" * 300 + "]" * 300
UNREADABLE = [
    pytest.param(DEEP, id="nested-300-deep"),
    pytest.param("[" * 5_000 + "]" * 5_000, id="nested-5000-deep"),
    pytest.param('{"name": "\\ud800"}', id="lone-surrogate"),
    pytest.param('{"ratio": NaN}', id="nan"),
    pytest.param("[1e400]", id="out-of-range"),
]


def job_with_run(client: TestClient, engine: Engine, result: str | None) -> int:
    """A job made through the API, with one execution row holding ``result`` as stored."""
    job_id = int(
        client.post("/openapi/jobs", json={"jobName": "j", "jobHandler": "demo.echo"}).json()[
            "jobId"
        ]
    )
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO executions (execution_id, job_id, attempt, trigger_time, status, "
                "result, created_at) VALUES ('e-1', :job, 1, 0, 'SUCCEEDED', :result, 0)"
            ),
            {"job": job_id, "result": result},
        )
    return job_id


@pytest.mark.parametrize("stored", UNREADABLE)
def test_a_stored_result_no_json_response_can_carry_is_shown_as_its_text(
    client: TestClient, engine: Engine, stored: str
) -> None:
    job_id = job_with_run(client, engine, stored)
    job = client.get(f"/openapi/jobs/{job_id}")
    runs = client.get(f"/openapi/jobs/{job_id}/executions")
    assert (job.status_code, runs.status_code) == (200, 200)
    assert job.json()["lastExecution"]["result"] == stored
    assert runs.json()["executions"][0]["result"] == stored


@pytest.mark.parametrize(
    "stored",
    ['{"rows": 42, "name": "€ 😀"}', "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "7", "null"],
)
def test_a_stored_json_result_is_shown_as_json(
    client: TestClient, engine: Engine, stored: str
) -> None:
    import json

    job_id = job_with_run(client, engine, stored)
    assert client.get(f"/openapi/jobs/{job_id}").json()["lastExecution"]["result"] == json.loads(
        stored
    )


def test_stored_text_that_is_not_json_is_shown_as_text(client: TestClient, engine: Engine) -> None:
    job_id = job_with_run(client, engine, 'clipped {"a": ...')
    assert client.get(f"/openapi/jobs/{job_id}").json()["lastExecution"]["result"] == (
        'clipped {"a": ...'
    )


@pytest.mark.parametrize("stored", UNREADABLE)
def test_stored_params_no_json_response_can_carry_are_shown_as_their_text(
    client: TestClient, engine: Engine, stored: str
) -> None:
    job_id = job_with_run(client, engine, None)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET params = :p WHERE id = :id"), {"p": stored, "id": job_id}
        )
    job = client.get(f"/openapi/jobs/{job_id}")
    assert job.status_code == 200
    assert job.json()["params"] == {"unrenderable": stored}
