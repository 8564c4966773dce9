"""Job dependencies through the OpenAPI on real MySQL: ``after`` stored as edges and
shown on the job; missing, foreign, deleted or repeated parents and cycles refused with
a 422 that writes nothing; concurrent creates of children all stored with their edges."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.job_dependencies import After, check_no_cycle, replace_edges
from common.db.retention import prune_jobs
from common.dependencies import DependOn
from common.errors import ValidationFailedError
from tests.integration.control_helpers import body, create, job_row
from tests.integration.helpers import make_app


def _edges(engine: Engine) -> list[tuple[int, int, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT child_job_id, parent_job_id, on_outcome FROM job_dependencies "
                "ORDER BY child_job_id, parent_job_id"
            )
        ).all()
    return [(int(r[0]), int(r[1]), str(r[2])) for r in rows]


def _job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def _refused(client: TestClient, engine: Engine, field: str, **overrides: Any) -> str:
    jobs, edges = _job_count(engine), _edges(engine)
    response = client.post("/openapi/jobs", json=body(**overrides))
    assert response.status_code == 422, response.text
    problem = response.json()
    assert [e["field"] for e in problem["errors"]] == [field], problem
    assert (_job_count(engine), _edges(engine)) == (jobs, edges)
    return str(problem["errors"][0]["message"])


def test_after_is_stored_as_edges_and_shown_on_the_job(client: TestClient, engine: Engine) -> None:
    a = create(client)
    b = create(client, cronExpr="0 2 * * *")
    c = create(client, after=[{"jobId": a}, {"jobId": b, "on": "FINISHED"}])
    assert _edges(engine) == [(c, a, "SUCCEEDED"), (c, b, "FINISHED")]
    assert job_row(engine, c)["has_dependencies"] == 1
    assert job_row(engine, a)["has_dependencies"] == 0
    view = client.get(f"/openapi/jobs/{c}").json()
    assert view["after"] == [{"jobId": a, "on": "SUCCEEDED"}, {"jobId": b, "on": "FINISHED"}]
    listed = {j["jobId"]: j["after"] for j in client.get("/openapi/jobs").json()["jobs"]}
    assert listed[a] == [] and listed[c] == view["after"]


def test_unknown_foreign_deleted_and_repeated_parents_are_refused(
    client: TestClient, engine: Engine
) -> None:
    own = create(client)
    other_key = make_app(engine, "other").api_key
    foreign = client.post(
        "/openapi/jobs", json=body(), headers={"Authorization": f"Bearer {other_key}"}
    ).json()["jobId"]
    gone = create(client)
    assert client.delete(f"/openapi/jobs/{gone}").status_code == 204
    assert "no job 999999" in _refused(client, engine, "after[0].jobId", after=[{"jobId": 999_999}])
    assert f"no job {foreign}" in _refused(
        client, engine, "after[1].jobId", after=[{"jobId": own}, {"jobId": foreign}]
    )
    assert "deleted" in _refused(client, engine, "after[0].jobId", after=[{"jobId": gone}])
    assert "twice" in _refused(
        client, engine, "after[1].jobId", after=[{"jobId": own}, {"jobId": own}]
    )
    response = client.post("/openapi/jobs", json=body(after=[{"jobId": own, "on": "MAYBE"}]))
    assert response.status_code == 422


def test_a_patch_that_closes_a_cycle_is_refused_and_writes_nothing(
    client: TestClient, engine: Engine
) -> None:
    a = create(client)
    b = create(client, after=[{"jobId": a}])
    c = create(client, after=[{"jobId": b}])
    before = _edges(engine)
    for patch, path in (([c], f"{a} -> {c} -> {b} -> {a}"), ([a], f"{a} -> {a}")):
        response = client.patch(f"/openapi/jobs/{a}", json={"after": [{"jobId": p} for p in patch]})
        assert response.status_code == 422, response.text
        assert path in response.json()["errors"][0]["message"]
    assert _edges(engine) == before
    assert job_row(engine, a)["has_dependencies"] == 0
    # A diamond is no cycle; [] removes the parents again.
    response = client.patch(f"/openapi/jobs/{c}", json={"after": [{"jobId": a}, {"jobId": b}]})
    assert response.status_code == 200, response.text
    assert response.json()["after"] == [
        {"jobId": a, "on": "SUCCEEDED"},
        {"jobId": b, "on": "SUCCEEDED"},
    ]
    assert client.patch(f"/openapi/jobs/{c}", json={"after": []}).json()["after"] == []
    assert job_row(engine, c)["has_dependencies"] == 0


def test_a_batch_with_a_bad_parent_is_refused_whole(client: TestClient, engine: Engine) -> None:
    a = create(client)
    jobs, edges = _job_count(engine), _edges(engine)
    bad = {"jobs": [body(after=[{"jobId": a}]), body(after=[{"jobId": 999_999}])]}
    response = client.post("/openapi/jobs/batch", json=bad)
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["jobs[1].after[0].jobId"]
    assert (_job_count(engine), _edges(engine)) == (jobs, edges)
    good = {"jobs": [body(after=[{"jobId": a}]), body()]}
    ids = [j["jobId"] for j in client.post("/openapi/jobs/batch", json=good).json()["jobs"]]
    assert _edges(engine) == [*edges, (ids[0], a, "SUCCEEDED")]


def test_concurrent_creates_of_children_each_store_their_own_edges(
    client: TestClient, engine: Engine
) -> None:
    parents = [create(client) for _ in range(3)]

    def child(i: int) -> int:
        after = [{"jobId": parents[i % 3]}, {"jobId": parents[(i + 1) % 3], "on": "FINISHED"}]
        response = client.post("/openapi/jobs", json=body(jobName=f"c{i}", after=after))
        assert response.status_code == 202, response.text
        return int(response.json()["jobId"])

    with ThreadPoolExecutor(8) as pool:
        children = list(pool.map(child, range(40)))
    expected = sorted(
        [(c, parents[i % 3], "SUCCEEDED") for i, c in enumerate(children)]
        + [(c, parents[(i + 1) % 3], "FINISHED") for i, c in enumerate(children)]
    )
    assert _edges(engine) == expected


def test_pruning_old_jobs_takes_their_edges_with_them(client: TestClient, engine: Engine) -> None:
    parent = create(client)
    child = create(client, after=[{"jobId": parent}])
    keeper = create(client)
    other = create(client, after=[{"jobId": keeper}])
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET status = 'SUCCEEDED', updated_at = 0 "
                f"WHERE id IN ({parent}, {child})"
            ),
        )
        # A foreign key from job_dependencies would refuse the DELETE of the jobs.
        assert prune_jobs(conn, before_ms=1, limit=10) == 2
    assert _edges(engine) == [(other, keeper, "SUCCEEDED")]


def test_two_changes_walking_at_once_cannot_close_a_cycle(
    client: TestClient, engine: Engine
) -> None:
    a, b = create(client), create(client)
    app_pk = _app_pk(engine, a)
    outcome: list[str] = []

    def b_after_a() -> None:
        try:
            with engine.begin() as conn:
                check_no_cycle(conn, app_pk, b, [After(a, DependOn.SUCCEEDED)])
                replace_edges(conn, b, [After(a, DependOn.SUCCEEDED)])
            outcome.append("stored")
        except ValidationFailedError as e:
            outcome.append(e.message)

    with engine.begin() as conn:
        check_no_cycle(conn, app_pk, a, [After(b, DependOn.SUCCEEDED)])
        # The other change walks after this one walked and before it stores its edge:
        # it must wait for this one, else each walk misses the other's edge.
        other = threading.Thread(target=b_after_a)
        other.start()
        time.sleep(0.5)
        replace_edges(conn, a, [After(b, DependOn.SUCCEEDED)])
    other.join(10)
    assert len(outcome) == 1 and "would close a cycle" in outcome[0], outcome
    assert {(c, p) for c, p, _ in _edges(engine)} == {(a, b)}


def _app_pk(engine: Engine, job_id: int) -> int:
    return int(job_row(engine, job_id)["app_pk"])


def test_concurrent_patches_cannot_close_a_cycle_between_them(
    client: TestClient, engine: Engine
) -> None:
    pairs = [(create(client), create(client)) for _ in range(6)]

    def patch(child: int, parent: int) -> int:
        response = client.patch(f"/openapi/jobs/{child}", json={"after": [{"jobId": parent}]})
        return response.status_code

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda p: patch(*p), [*pairs, *((b, a) for a, b in pairs)]))
    stored = {(c, p) for c, p, _ in _edges(engine)}
    for index, (a, b) in enumerate(pairs):
        # One of the two patches of the pair wins; the other is told it closes a cycle.
        assert sorted([answers[index], answers[index + len(pairs)]]) == [200, 422]
        assert ((a, b) in stored) != ((b, a) in stored)
