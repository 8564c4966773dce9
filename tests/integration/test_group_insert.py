"""Single creates stored together by the API's GroupInserter, on real MySQL."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from common.db.jobs import NewJob
from services.api.group_insert import Announce, GroupInserter
from tests.integration.helpers import make_app

Announced = list[tuple[list[str], list[int]]]


def job(app_pk: int, name: str) -> NewJob:
    return NewJob(app_pk, name, "demo.noop", {"n": name}, None, 1_000, None, None, None)


def new_app(engine: Engine) -> int:
    app_id = make_app(engine).app_id
    with engine.connect() as conn:
        pk = conn.execute(sa.text("SELECT id FROM apps WHERE app_id = :a"), {"a": app_id})
        return int(pk.scalar_one())


def recorder(calls: Announced) -> Announce:
    def announce(new_jobs: Sequence[NewJob], ids: Sequence[int], _now: int) -> None:
        calls.append(([j.job_name for j in new_jobs], list(ids)))

    return announce


def test_concurrent_inserts_each_get_their_own_stored_job(engine: Engine) -> None:
    app_pk = new_app(engine)
    calls: Announced = []
    inserter = GroupInserter(engine, recorder(calls))
    names = [f"job-{n}" for n in range(200)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        ids = list(pool.map(lambda name: inserter.insert(job(app_pk, name), 1_000), names))
    inserter.stop()
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, job_name FROM jobs")).all()
    stored = {int(r[0]): str(r[1]) for r in rows}
    assert len(set(ids)) == len(names)
    assert {stored[i] for i in ids} == set(names)
    assert [stored[i] for i in ids] == names
    announced = {i for _, group in calls for i in group}
    assert announced == set(ids)


def test_a_group_that_cannot_be_stored_fails_every_caller_in_it(engine: Engine) -> None:
    broken = sa.create_engine("mysql+pymysql://root@127.0.0.1:1/nowhere")
    inserter = GroupInserter(broken, recorder([]))
    futures = [inserter.submit(job(1, f"j{n}"), 1_000) for n in range(5)]
    for future in futures:
        with pytest.raises(OperationalError):
            future.result(timeout=30)
    inserter.stop()


def test_stop_stores_what_is_queued(engine: Engine) -> None:
    app_pk = new_app(engine)
    inserter = GroupInserter(engine, recorder([]))
    futures = [inserter.submit(job(app_pk, f"j{n}"), 1_000) for n in range(50)]
    inserter.stop()
    assert all(f.done() and f.exception() is None for f in futures)


def test_api_single_creates_from_many_clients_are_all_stored(client: TestClient) -> None:
    body = {"jobName": "many", "jobHandler": "demo.noop", "triggerAt": 4_000_000_000_000}

    def create(n: int) -> int:
        response = client.post("/openapi/jobs", json={**body, "params": {"n": n}})
        assert response.status_code == 202, response.text
        return int(response.json()["jobId"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(create, range(60)))
    assert len(set(ids)) == 60
    for n, job_id in enumerate(ids):
        assert client.get(f"/openapi/jobs/{job_id}").json()["params"] == {"n": n}
