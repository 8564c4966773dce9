"""Job control through HTTP against running processes: pause, resume, trigger, cancel."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until


def start(processes: Processes) -> Api:
    processes.start("w1", "worker", "--id", "w1")
    processes.start("d1", "dispatcher", "--id", "d1")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return connect_api(processes, port)


def act(api: Api, job_id: int, action: str) -> httpx.Response:
    return httpx.post(
        f"{api.base}/openapi/jobs/{job_id}/{action}",
        headers={"Authorization": f"Bearer {api.api_key}"},
        timeout=10,
    )


def succeeded(api: Api, job_id: int) -> list[dict[str, Any]]:
    return [r for r in api.executions(job_id) if r["status"] == "SUCCEEDED"]


def test_pause_stops_a_cron_job_and_resume_starts_it_again(processes: Processes) -> None:
    api = start(processes)
    job_id = api.post_job(
        {"jobName": "tick", "jobHandler": "demo.noop", "cronExpr": "* * * * * *"}
    ).json()["jobId"]
    wait_until(lambda: len(succeeded(api, job_id)) >= 2, 15, what="runs before pause")
    assert act(api, job_id, "pause").json()["status"] == "PAUSED"
    time.sleep(1.5)  # let a run already sent finish
    before = len(api.executions(job_id))
    time.sleep(2.5)
    assert len(api.executions(job_id)) == before, "a paused job fired"
    assert act(api, job_id, "resume").status_code == 200
    wait_until(lambda: len(succeeded(api, job_id)) >= before + 2, 15, what="runs after resume")


def test_trigger_runs_a_job_now_besides_its_schedule(processes: Processes) -> None:
    api = start(processes)
    job_id = api.post_job(
        {"jobName": "yearly", "jobHandler": "demo.echo", "cronExpr": "0 0 1 1 *"}
    ).json()["jobId"]
    triggered = act(api, job_id, "trigger")
    assert triggered.status_code == 202
    execution_id = triggered.json()["executionId"]
    wait_until(lambda: succeeded(api, job_id), 15, what="the manual run")
    assert succeeded(api, job_id)[0]["executionId"] == execution_id
    assert api.job(job_id)["status"] == "WAITING"


def test_cancel_ends_a_job_and_a_cancelled_job_cannot_resume(processes: Processes) -> None:
    api = start(processes)
    job_id = api.post_job(
        {"jobName": "tick", "jobHandler": "demo.noop", "cronExpr": "* * * * * *"}
    ).json()["jobId"]
    wait_until(lambda: succeeded(api, job_id), 15, what="a first run")
    assert act(api, job_id, "cancel").json()["status"] == "CANCELLED"
    time.sleep(1.5)
    settled = len(api.executions(job_id))
    time.sleep(2)
    assert len(api.executions(job_id)) == settled, "a cancelled job fired"
    refused = act(api, job_id, "resume")
    assert refused.status_code == 409
    assert "CANCELLED" in refused.json()["detail"]
