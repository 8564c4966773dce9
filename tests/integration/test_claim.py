"""Claiming due jobs by version compare-and-set on real MySQL."""

from __future__ import annotations

import threading

from sqlalchemy.engine import Engine

from common.db.jobs import NewJob, claim_jobs, find_due_jobs, get_job, insert_job, next_due_time
from common.states import JobStatus
from tests.integration.helpers import make_app


def add_job(engine: Engine, app_pk: int, trigger: int, handler: str = "demo.noop") -> int:
    job = NewJob(app_pk, "j", handler, {}, None, trigger, None, None, None)
    with engine.begin() as conn:
        return insert_job(conn, job, 0)


def test_due_scan_returns_due_jobs_oldest_first_for_known_handlers(engine: Engine) -> None:
    app = make_app(engine)
    with engine.connect() as conn:
        app_pk = int(conn.exec_driver_sql("SELECT id FROM apps").scalar_one())
    later = add_job(engine, app_pk, 200)
    earlier = add_job(engine, app_pk, 100)
    add_job(engine, app_pk, 100, handler="other.handler")
    add_job(engine, app_pk, 10_000)
    with engine.connect() as conn:
        due = find_due_jobs(conn, 500, {"demo.noop"}, 10)
        assert next_due_time(conn, {"demo.noop"}) == 100
    assert [j.id for j in due] == [earlier, later]
    assert app.app_id


def test_two_claimers_of_the_same_batch_split_it_without_overlap(engine: Engine) -> None:
    make_app(engine)
    ids = [add_job(engine, 1, 100 + i) for i in range(200)]
    with engine.connect() as conn:
        due = find_due_jobs(conn, 1_000, {"demo.noop"}, 500)
    won: list[set[int]] = []
    barrier = threading.Barrier(2)

    def claim() -> None:
        with engine.begin() as conn:
            barrier.wait()
            won.append(claim_jobs(conn, due, {j.id: "w1" for j in due}, 1_000))

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert won[0].isdisjoint(won[1])
    assert won[0] | won[1] == set(ids)


def test_a_stale_version_claims_nothing(engine: Engine) -> None:
    make_app(engine)
    job_id = add_job(engine, 1, 100)
    with engine.connect() as conn:
        stale = find_due_jobs(conn, 1_000, {"demo.noop"}, 10)
    with engine.begin() as conn:
        assert claim_jobs(conn, stale, {job_id: "w1"}, 1_000) == {job_id}
    with engine.begin() as conn:
        assert claim_jobs(conn, stale, {job_id: "w1"}, 1_000) == set()
        row = get_job(conn, 1, job_id)
    assert row is not None
    assert row.status == JobStatus.RUNNING
    assert row.version == 1
    assert row.owner_worker == "w1"
