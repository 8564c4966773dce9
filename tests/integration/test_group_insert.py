"""Single creates stored together by the API's GroupInserter, on real MySQL."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from common.db.jobs import NewJob
from common.errors import IdempotencyConflictError, ValidationFailedError
from services.api import group_insert
from services.api import submit as submit_module
from services.api.group_insert import Announce, GroupInserter, _Pending, store_group
from services.api.idempotency import Submitted
from services.api.validation import build_job
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

    def store(name: str) -> int:
        return inserter.submit(job(app_pk, name), 1_000).result().job_id

    with ThreadPoolExecutor(max_workers=16) as pool:
        ids = list(pool.map(store, names))
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


def keyed(app_pk: int, key: str, body: str) -> NewJob:
    return NewJob(app_pk, "k", "demo.noop", {"b": body}, None, 1_000, None, key, f"hash-{body}")


def stored_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def test_a_client_request_id_repeated_in_one_group_is_stored_once(engine: Engine) -> None:
    app_pk = new_app(engine)
    with engine.begin() as conn:
        answers = store_group(
            conn,
            [keyed(app_pk, "r-1", "a"), job(app_pk, "plain"), keyed(app_pk, "r-1", "a")],
            1_000,
        )
    first, plain, again = answers
    assert isinstance(first, Submitted) and first.created
    assert isinstance(plain, Submitted) and plain.created
    assert again == Submitted(first.job_id, "WAITING", created=False)
    assert stored_count(engine) == 2


def test_a_repeat_with_another_body_in_one_group_conflicts(engine: Engine) -> None:
    app_pk = new_app(engine)
    with engine.begin() as conn:
        first, other = store_group(
            conn, [keyed(app_pk, "r-1", "a"), keyed(app_pk, "r-1", "b")], 1_000
        )
    assert isinstance(first, Submitted) and first.created
    assert isinstance(other, IdempotencyConflictError) and other.job_id == first.job_id
    assert stored_count(engine) == 1


def test_ids_used_before_map_to_their_jobs_or_conflict(engine: Engine) -> None:
    app_pk = new_app(engine)
    with engine.begin() as conn:
        (earlier,) = store_group(conn, [keyed(app_pk, "r-1", "a")], 1_000)
    assert isinstance(earlier, Submitted)
    with engine.begin() as conn:
        answers = store_group(
            conn,
            [keyed(app_pk, "r-1", "b"), keyed(app_pk, "r-1", "a"), keyed(app_pk, "r-2", "a")],
            1_000,
        )
    conflict, same, fresh = answers
    assert isinstance(conflict, IdempotencyConflictError)
    assert same == Submitted(earlier.job_id, "WAITING", created=False)
    assert isinstance(fresh, Submitted) and fresh.created
    assert stored_count(engine) == 2


def test_the_same_id_in_two_apps_is_two_jobs(engine: Engine) -> None:
    one, two = new_app(engine), new_app(engine)
    with engine.begin() as conn:
        a, b = store_group(conn, [keyed(one, "r-1", "a"), keyed(two, "r-1", "a")], 1_000)
    assert isinstance(a, Submitted) and isinstance(b, Submitted)
    assert a.created and b.created and a.job_id != b.job_id


def test_ids_differing_in_case_or_trailing_spaces_are_different_keys(engine: Engine) -> None:
    app_pk = new_app(engine)
    inserter = GroupInserter(engine, recorder([]))
    keys = ["Req-1", "req-1", "req-1 ", "réq-1"]
    pending = [_Pending(keyed(app_pk, key, "a"), 1_000) for key in keys]
    inserter._store(pending)
    answers = [p.stored.result(timeout=10) for p in pending]
    assert all(answer.created for answer in answers)
    assert len({answer.job_id for answer in answers}) == len(keys)
    assert stored_count(engine) == len(keys)
    again = [_Pending(keyed(app_pk, key, "a"), 1_000) for key in keys]
    inserter._store(again)
    replayed = [p.stored.result(timeout=10) for p in again]
    assert [a.job_id for a in replayed] == [a.job_id for a in answers]
    assert not any(a.created for a in replayed)


def test_one_row_mysql_refuses_fails_only_its_own_caller(engine: Engine) -> None:
    app_pk = new_app(engine)
    inserter = GroupInserter(engine, recorder([]))
    out_of_range = NewJob(app_pk, "huge", "demo.noop", {}, None, 2**70, None, None, None)
    not_utf8 = NewJob(app_pk, "x\ud800", "demo.noop", {}, None, 1_000, None, None, None)
    good = [job(app_pk, f"good-{n}") for n in range(6)]
    pending = [_Pending(j, 1_000) for j in [*good[:3], out_of_range, not_utf8, *good[3:]]]
    inserter._store(pending)
    huge_error = pending[3].stored.exception(timeout=10)
    assert isinstance(huge_error, ValidationFailedError) and huge_error.field == "triggerAt"
    assert isinstance(pending[4].stored.exception(timeout=10), ValidationFailedError)
    stored = [p.stored.result(timeout=10) for i, p in enumerate(pending) if i not in (3, 4)]
    assert all(answer.created for answer in stored)
    with engine.connect() as conn:
        names = set(conn.execute(sa.text("SELECT job_name FROM jobs")).scalars())
    assert names == {j.job_name for j in good}


def test_concurrent_creates_are_stored_around_one_bad_row(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifteen creates of one group, one of which MySQL refuses: that one is a 422 naming
    its field, the fourteen others are 202 and stored."""
    gate = threading.Event()
    first_call = threading.Event()

    def gated_store_group(conn: Any, new_jobs: Sequence[NewJob], now_ms: int) -> Any:
        if not first_call.is_set():
            first_call.set()
            gate.wait(timeout=30)
        return store_group(conn, new_jobs, now_ms)

    def build_job_poisoned(body: Any, *args: Any) -> NewJob:
        built = build_job(body, *args)
        if body.jobName == "poison":
            return dataclasses.replace(built, next_trigger_time=2**70)
        return built

    monkeypatch.setattr(group_insert, "store_group", gated_store_group)
    monkeypatch.setattr(submit_module, "build_job", build_job_poisoned)
    inserter = client.app.state.kairos.inserter  # type: ignore[attr-defined]

    def create(name: str) -> Any:
        body = {"jobName": name, "jobHandler": "demo.noop", "triggerAt": 4_000_000_000_000}
        return client.post("/openapi/jobs", json=body)

    with ThreadPoolExecutor(max_workers=16) as pool:
        opener = pool.submit(create, "opener")
        first_call.wait(timeout=30)
        names = [f"job-{n}" for n in range(14)] + ["poison"]
        answers = [pool.submit(create, name) for name in names]
        deadline = time.monotonic() + 30
        while inserter._queue.qsize() < len(names) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert inserter._queue.qsize() == len(names)
        gate.set()
        responses = dict(zip(names, (a.result(timeout=30) for a in answers), strict=True))
        assert opener.result(timeout=30).status_code == 202
    poison = responses.pop("poison")
    assert poison.status_code == 422, poison.text
    assert poison.json()["errors"][0]["field"] == "triggerAt"
    assert [r.status_code for r in responses.values()] == [202] * 14
    with engine.connect() as conn:
        stored = set(conn.execute(sa.text("SELECT job_name FROM jobs")).scalars())
    assert stored == {"opener", *responses}
