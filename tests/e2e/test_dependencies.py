"""Job dependencies with the real stack: two apps submit chains (A -> B -> C) with fan-in
(C after A and B) concurrently, and failing parents; a dispatcher is killed while
children wait. The books: each child ran once, only after its parents ended as named;
a failed parent's child is SKIPPED with the reason; every run records what it waited for."""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until

GROUPS = 6  # chains per app


def _start(processes: Processes) -> tuple[Api, Api]:
    for worker in ("w1", "w2"):
        processes.start(worker, "worker", "--id", worker)
    processes.start("d1", "dispatcher", "--id", "d1")
    processes.start("d2", "dispatcher", "--id", "d2")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    first = connect_api(processes, port)
    created = json.loads(processes.run("app", "create", "e2e-second", "--handlers", "*"))
    return first, Api(first.base, created["apiKey"], created["signingSecret"])


def _submit_all(api: Api, bodies: list[dict[str, Any]]) -> list[int]:
    """POST the bodies concurrently; their job ids, in order."""

    def post(body: dict[str, Any]) -> int:
        response = api.post_job(body)
        assert response.status_code == 202, response.text
        return int(response.json()["jobId"])

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(post, bodies))


def _job(name: str, handler: str = "demo.sleep", **extra: Any) -> dict[str, Any]:
    params = {"seconds": 0.3} if handler == "demo.sleep" else {}
    return {"jobName": name, "jobHandler": handler, "params": params, **extra}


def _after(*parents: int, on: str = "SUCCEEDED") -> list[dict[str, Any]]:
    return [{"jobId": p, "on": on} for p in parents]


def _runs(engine: Engine, job_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT job_id, execution_id, status, started_at, ended_at, message, "
                f"waited_for FROM executions WHERE job_id IN ({', '.join(map(str, job_ids))})"
            )
        ).all()
    found: dict[int, list[dict[str, Any]]] = {j: [] for j in job_ids}
    for row in rows:
        found[int(row.job_id)].append(dict(row._mapping))
    return found


def _submit_chains(api: Api, app: str) -> dict[str, list[int]]:
    """Per group: A, B after A, C after A and B; F fails, G after F (SUCCEEDED), H after
    F (FINISHED). Each layer is submitted concurrently once its parents exist."""
    a = _submit_all(api, [_job(f"{app}-a{i}") for i in range(GROUPS)])
    f = _submit_all(api, [_job(f"{app}-f{i}", "demo.fail") for i in range(GROUPS)])
    b = _submit_all(api, [_job(f"{app}-b{i}", after=_after(a[i])) for i in range(GROUPS)])
    rest = _submit_all(
        api,
        [_job(f"{app}-c{i}", after=_after(a[i], b[i])) for i in range(GROUPS)]
        + [_job(f"{app}-g{i}", "demo.noop", after=_after(f[i])) for i in range(GROUPS)]
        + [
            _job(f"{app}-h{i}", "demo.noop", after=_after(f[i], on="FINISHED"))
            for i in range(GROUPS)
        ],
    )
    c, g, h = rest[:GROUPS], rest[GROUPS : 2 * GROUPS], rest[2 * GROUPS :]
    return {"a": a, "b": b, "c": c, "f": f, "g": g, "h": h}


def _check_ran_after(
    runs: dict[int, list[dict[str, Any]]], child: int, parents: list[int]
) -> list[str]:
    """Problems: the child did not run exactly once, or started before a parent ended,
    or does not record its parents' runs."""
    mine = runs[child]
    if len(mine) != 1:
        return [f"job {child} has {len(mine)} runs"]
    run = mine[0]
    problems = []
    ends = {runs[p][0]["execution_id"]: runs[p][0]["ended_at"] for p in parents}
    if run["started_at"] is None or any(run["started_at"] < end for end in ends.values()):
        problems.append(f"job {child} started before a parent ended")
    waited = [w["executionId"] for w in json.loads(run["waited_for"] or "[]")]
    if sorted(waited) != sorted(ends):
        problems.append(f"job {child} waited for {waited}, not {sorted(ends)}")
    return problems


def test_chains_and_fan_in_of_two_apps_run_in_order_and_a_failed_parent_skips(
    processes: Processes, engine: Engine
) -> None:
    first, second = _start(processes)
    with ThreadPoolExecutor(2) as pool:
        jobs = list(pool.map(_submit_chains, (first, second), ("one", "two")))
    # A dispatcher dies (SIGKILL) while children wait: the other carries on from MySQL.
    processes.signal("d1", signal.SIGKILL)
    ok = [j for group in jobs for k in "abcfh" for j in group[k]]
    skipped = [j for group in jobs for j in group["g"]]
    ran_ok = Expectation(
        [j for group in jobs for k in "abch" for j in group[k]], {"SUCCEEDED"}, {"SUCCEEDED"}
    )
    failed = Expectation([j for group in jobs for j in group["f"]], {"FAILED"}, {"FAILED"})
    books = assert_books(engine, ran_ok, failed, timeout=90)
    wait_until(lambda: _all_skipped(engine, skipped), 30, what="the children of failed parents")
    runs = _runs(engine, ok + skipped)
    problems: list[str] = []
    for group in jobs:
        for i in range(GROUPS):
            a, b, c = group["a"][i], group["b"][i], group["c"][i]
            f, g, h = group["f"][i], group["g"][i], group["h"][i]
            problems += _check_ran_after(runs, b, [a])
            problems += _check_ran_after(runs, c, [a, b])
            problems += _check_ran_after(runs, h, [f])
            failed_run = runs[f][0]["execution_id"]
            (skip,) = runs[g]
            reason = f"skipped: parent job {f} run {failed_run} FAILED"
            if (skip["status"], skip["message"]) != ("SKIPPED", reason):
                problems.append(f"job {g}: {skip['status']} {skip['message']!r}")
    assert problems == [], problems
    assert books.executions == len(ok)
    # The API shows what a run waited for.
    child = jobs[0]["c"][0]
    shown = first.executions(child)[0]["waitedFor"]
    assert sorted(w["jobId"] for w in shown) == sorted([jobs[0]["a"][0], jobs[0]["b"][0]])


def _all_skipped(engine: Engine, job_ids: list[int]) -> bool:
    """Whether each of these jobs has one run, SKIPPED."""
    runs = _runs(engine, job_ids)
    return all([r["status"] for r in rs] == ["SKIPPED"] for rs in runs.values())


def _trigger_runs(engine: Engine, job_id: int) -> dict[int, dict[str, Any]]:
    """The job's runs by trigger time."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT trigger_time, execution_id, status, started_at, ended_at, message, "
                "waited_for FROM executions WHERE job_id = :j AND manual = 0"
            ),
            {"j": job_id},
        ).all()
    return {int(r.trigger_time): dict(r._mapping) for r in rows}


def test_cron_children_wait_for_the_parents_run_at_their_own_trigger_time(
    processes: Processes, engine: Engine
) -> None:
    api, _ = _start(processes)
    every = {"cronExpr": "*/3 * * * * *", "overlapPolicy": "ALLOW"}
    parent = _submit_all(api, [_job("parent", **every)])[0]
    failing = _submit_all(api, [_job("failing", "demo.fail", **every)])[0]
    child, finished = _submit_all(
        api,
        [
            _job("child", "demo.noop", after=_after(parent), **every),
            _job("finished", "demo.noop", after=_after(failing, on="FINISHED"), **every),
        ],
    )

    def three_child_runs() -> bool:
        runs = _trigger_runs(engine, child).values()
        return len([r for r in runs if r["status"] == "SUCCEEDED"]) >= 3

    wait_until(three_child_runs, 40, what="three runs of the cron child")
    for job_id in (child, finished, parent, failing):
        assert api.act(job_id, "cancel").status_code == 200
    jobs = [parent, failing, child, finished]
    assert_books(engine, Expectation(jobs, {"CANCELLED"}, {*CANCELLED_CRON, "FAILED"}), timeout=30)
    problems: list[str] = []
    for kid, mother in ((child, parent), (finished, failing)):
        theirs = _trigger_runs(engine, mother)
        for trigger, run in _trigger_runs(engine, kid).items():
            if run["status"] != "SUCCEEDED":
                continue
            matched = theirs.get(trigger)
            waited = [w["executionId"] for w in json.loads(run["waited_for"] or "[]")]
            if matched is None or waited != [matched["execution_id"]]:
                problems.append(f"job {kid} run at {trigger} waited for {waited}")
            elif run["started_at"] < matched["ended_at"]:
                problems.append(f"job {kid} run at {trigger} started before its parent's ended")
    assert problems == [], problems
    assert sum(r["status"] == "SUCCEEDED" for r in _trigger_runs(engine, finished).values()) >= 2
