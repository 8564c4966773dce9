"""Triggers with params and jitter against running processes: a triggered run's handler
gets the params the trigger gave it, the cron's own runs keep the job's, and jittered
runs fire at their offset; every job, execution and outcome accounted for."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy.engine import Engine

from common.jitter import jitter_offset_ms
from common.timefmt import parse_instant
from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until

APPS = 2
CRON_JOBS = 4  # per app, every second
TRIGGERS = 3  # per cron job, at once
JITTERED_JOBS = 2  # per app, every 2 s with 1 s of jitter


def _start(processes: Processes) -> list[Api]:
    processes.start("w1", "worker", "--id", "w1")
    processes.start("w2", "worker", "--id", "w2")
    processes.start("d1", "dispatcher", "--id", "d1")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    first = connect_api(processes, port)
    others = []
    for n in range(1, APPS):
        made = json.loads(processes.run("app", "create", f"e2e-{n}", "--handlers", "*"))
        others.append(Api(first.base, made["apiKey"], made["signingSecret"]))
    return [first, *others]


def _create(api: Api, body: dict[str, Any]) -> int:
    made = api.post_job({"jobHandler": "demo.echo", **body})
    assert made.status_code == 202, made.text
    job_id: int = made.json()["jobId"]
    return job_id


def _succeeded(api: Api, job_id: int) -> list[dict[str, Any]]:
    return [r for r in api.executions(job_id) if r["status"] == "SUCCEEDED"]


Cron = list[tuple[Api, int, dict[str, Any]]]
Triggered = list[tuple[Api, int, str, dict[str, Any]]]


def _submit(apps: list[Api]) -> tuple[Cron, list[tuple[Api, int]]]:
    """Each app's every-second cron jobs (with their params) and jittered jobs."""
    cron: Cron = []
    jittered: list[tuple[Api, int]] = []
    for a, api in enumerate(apps):
        for n in range(CRON_JOBS):
            params = {"app": a, "job": n}
            job: dict[str, Any] = {"jobName": f"c{n}", "cronExpr": "* * * * * *"}
            cron.append((api, _create(api, {**job, "params": params}), params))
        for n in range(JITTERED_JOBS):
            job = {"jobName": f"j{n}", "fixedRateSeconds": 2, "jitterSeconds": 1}
            jittered.append((api, _create(api, job)))
    return cron, jittered


def _trigger_all(cron: Cron) -> Triggered:
    """Every cron job triggered ``TRIGGERS`` times at once, each run with its own params."""
    calls = [(api, job_id, i) for api, job_id, _ in cron for i in range(TRIGGERS)]

    def fire(call: tuple[Api, int, int]) -> tuple[Api, int, str, dict[str, Any]]:
        api, job_id, i = call
        own = {"own": job_id, "i": i, "text": "ünïcode"}
        answer = api.trigger(job_id, own)
        assert answer.status_code == 202, answer.text
        return api, job_id, answer.json()["executionId"], own

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(fire, calls))


def _settled(cron: Cron, jittered: list[tuple[Api, int]], manual_ids: set[str]) -> bool:
    """Every triggered run, and two scheduled runs of each job, succeeded."""
    for api, job_id, _ in cron:
        runs = _succeeded(api, job_id)
        done = [r for r in runs if r["executionId"] in manual_ids]
        if len(done) < TRIGGERS or len(runs) - len(done) < 2:
            return False
    return all(len(_succeeded(api, job_id)) >= 2 for api, job_id in jittered)


# The worker stamps startedAt by its own clock, the dispatcher fires by the cluster's.
CLOCKS_APART_MS = 50


def _check_jittered(jittered: list[tuple[Api, int]]) -> None:
    """Each run was set to fire at its trigger plus the job's offset (or later, were the
    claim itself late), and started then, never before; runs claimed on time fire at
    exactly that time."""
    for api, job_id in jittered:
        exact = 0
        for run in _succeeded(api, job_id):
            trigger = parse_instant(run["triggerTime"])
            due = trigger + jitter_offset_ms(job_id, trigger, 1)
            assert parse_instant(run["scheduledAt"]) >= due, run
            assert parse_instant(run["startedAt"]) >= due - CLOCKS_APART_MS, run
            exact += parse_instant(run["scheduledAt"]) == due
        assert exact >= 1, api.executions(job_id)


def test_triggered_runs_get_their_params_and_scheduled_runs_the_jobs(
    processes: Processes, engine: Engine
) -> None:
    apps = _start(processes)
    cron, jittered = _submit(apps)
    triggered = _trigger_all(cron)
    manual_ids = {execution_id for _, _, execution_id, _ in triggered}
    assert len(manual_ids) == len(cron) * TRIGGERS
    wait_until(
        lambda: _settled(cron, jittered, manual_ids),
        60,
        what="every triggered run and two scheduled runs of each job",
    )
    for api, job_id, execution_id, own in triggered:
        [run] = [r for r in api.executions(job_id) if r["executionId"] == execution_id]
        assert (run["manual"], run["params"], run["result"]) == (True, own, own)
    for api, job_id, params in cron:
        scheduled = [r for r in _succeeded(api, job_id) if not r["manual"]]
        assert scheduled and all(r["params"] is None for r in scheduled)
        assert all(r["result"] == params for r in scheduled), scheduled
    _check_jittered(jittered)
    owned = [(api, job_id) for api, job_id, _ in cron] + jittered
    for api, job_id in owned:
        assert api.act(job_id, "cancel").status_code == 200
    job_ids = [job_id for _, job_id in owned]
    books = assert_books(engine, Expectation(job_ids, {"CANCELLED"}, CANCELLED_CRON), timeout=60)
    assert books.executions >= len(manual_ids) + 2 * len(job_ids)
