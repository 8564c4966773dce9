"""Run logs end to end: several apps' runs logging at once on one worker of capacity 8,
each run's lines in its own execution only; a running run followed by the CLI; the
bound on one run's log; runs that log nothing store nothing."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import KAIROS, Api, Processes, connect_api, free_port, wait_until

APPS = 3
LOGGING_JOBS = 40  # per app
QUIET_JOBS = 20  # per app
LINES = 12
MAX_BYTES = 4096

# A dozen processes on a shared small machine, and a few hundred calls.
pytestmark = pytest.mark.timeout(300)


def http(api: Api) -> httpx.Client:
    """One connection pool per app: a fresh client per call costs a TLS context each."""
    headers = {"Authorization": f"Bearer {api.api_key}"}
    return httpx.Client(base_url=api.base, headers=headers, timeout=30)


def start(processes: Processes) -> list[Api]:
    processes.start("d", "dispatcher")
    processes.start(
        "w1",
        "worker",
        *("--id", "w1", "--capacity", "8", "--handlers", "services.worker.demo"),
        KAIROS_RUN_LOG_MAX_BYTES=str(MAX_BYTES),
    )
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    first = connect_api(processes, port)
    others = [
        json.loads(processes.run("app", "create", f"app{n}", "--handlers", "*")) for n in (1, 2)
    ]
    return [first] + [Api(first.base, o["apiKey"], o["signingSecret"]) for o in others]


def lines_for(app: int, job: int) -> list[str]:
    return [f"app{app} job{job} line{k} " + "x" * (k % 5) for k in range(LINES)]


def submit_all(apis: list[Api]) -> tuple[dict[int, tuple[Api, list[str]]], list[tuple[Api, int]]]:
    """Every app's logging and quiet jobs, posted from a thread per app at once."""

    def post(app: int) -> tuple[list[tuple[int, list[str]]], list[int]]:
        logging_jobs, quiet = [], []
        with http(apis[app]) as client:
            for n in range(LOGGING_JOBS):
                lines = lines_for(app, n)
                body = {"jobName": f"log-{n}", "jobHandler": "demo.log", "params": {"lines": lines}}
                logging_jobs.append(
                    (client.post("/openapi/jobs", json=body).json()["jobId"], lines)
                )
                if n < QUIET_JOBS:
                    body = {"jobName": f"q-{n}", "jobHandler": "demo.noop"}
                    quiet.append(client.post("/openapi/jobs", json=body).json()["jobId"])
        return logging_jobs, quiet

    with ThreadPoolExecutor(APPS) as pool:
        posted = list(pool.map(post, range(APPS)))
    logging_jobs = {
        job_id: (apis[app], lines) for app, (jobs, _) in enumerate(posted) for job_id, lines in jobs
    }
    quiet_jobs = [(apis[app], job_id) for app, (_, quiet) in enumerate(posted) for job_id in quiet]
    return logging_jobs, quiet_jobs


def run_log(client: httpx.Client, execution_id: str, after: int = 0) -> httpx.Response:
    return client.get(f"/openapi/executions/{execution_id}/logs?after={after}&limit=1000")


def only_execution(client: httpx.Client, job_id: int) -> dict[str, Any]:
    response = client.get(f"/openapi/jobs/{job_id}/executions")
    response.raise_for_status()
    runs: list[dict[str, Any]] = response.json()["executions"]
    assert len(runs) == 1
    return runs[0]


def expected(lines: list[str]) -> list[str]:
    """demo.log writes even lines through ctx.log, odd ones through logging."""
    return [line if k % 2 == 0 else f"kairos.demo: {line}" for k, line in enumerate(lines)]


def test_each_runs_lines_land_in_its_own_execution_only(
    processes: Processes, engine: Engine
) -> None:
    apis = start(processes)
    logging_jobs, quiet_jobs = submit_all(apis)
    everything = list(logging_jobs) + [job_id for _, job_id in quiet_jobs]
    assert_books(engine, Expectation(everything, execution_statuses={"SUCCEEDED"}), timeout=120)
    clients = {api.api_key: http(api) for api in apis}
    stored = 0
    for job_id, (api, lines) in logging_jobs.items():
        client = clients[api.api_key]
        execution = only_execution(client, job_id)
        page = run_log(client, execution["executionId"]).json()
        assert page["ended"] and page["status"] == "SUCCEEDED"
        assert [x["line"] for x in page["lines"]] == expected(lines), job_id
        assert [x["seq"] for x in page["lines"]] == list(range(1, LINES + 1))
        stored += len(page["lines"])
        stranger = apis[(apis.index(api) + 1) % APPS]
        assert run_log(clients[stranger.api_key], execution["executionId"]).status_code == 404
    quiet_ids = {
        only_execution(clients[api.api_key], job_id)["executionId"] for api, job_id in quiet_jobs
    }
    for client in clients.values():
        client.close()
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT execution_id FROM execution_logs")).scalars().all()
    assert len(rows) == stored == APPS * LOGGING_JOBS * LINES
    assert not quiet_ids & set(rows), "a run that logged nothing stored lines"


def test_a_running_run_is_followed_and_a_long_log_is_cut_and_marked(
    processes: Processes, engine: Engine
) -> None:
    api = start(processes)[0]
    with http(api) as client:
        follow_and_cut(processes, api, client)


def follow_and_cut(processes: Processes, api: Api, client: httpx.Client) -> None:
    steps = [f"step {k}" for k in range(8)]
    slow = {"lines": steps, "seconds": 4}
    job_id = api.post_job({"jobName": "slow", "jobHandler": "demo.log", "params": slow}).json()[
        "jobId"
    ]
    execution = wait_until(lambda: api.executions(job_id), 30, what="the execution")[0]
    execution_id = execution["executionId"]
    follow = subprocess.Popen(
        [KAIROS, "executions", "logs", execution_id, "--follow", "-o", "json"],
        env=processes.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    # Lines show while it runs, not only once it has ended.
    mid = wait_until(
        lambda: (page := run_log(client, execution_id).json())["lines"] and page,
        10,
        interval=0.2,
        what="a line",
    )
    assert mid["ended"] is False
    out, _ = follow.communicate(timeout=60)
    assert follow.returncode == 0
    followed = [json.loads(line)["line"] for line in out.splitlines()]
    assert followed == expected(steps)
    long_lines = {"lines": [f"{k:04d} " + "y" * 95 for k in range(200)]}
    long_job = api.post_job({"jobName": "long", "jobHandler": "demo.log", "params": long_lines})
    api.wait_status(long_job.json()["jobId"], {"SUCCEEDED"})
    long_run = only_execution(client, long_job.json()["jobId"])
    page = run_log(client, long_run["executionId"]).json()
    texts = [x["line"] for x in page["lines"]]
    assert sum(len(t.encode()) for t in texts[:-1]) <= MAX_BYTES
    assert texts[0] == long_lines["lines"][0]
    assert "log truncated" in texts[-1] and page["lines"][-1]["level"] == "WARNING"
    whole = processes.run("executions", "logs", long_run["executionId"])
    assert "log truncated" in whole and long_lines["lines"][0] in whole
