"""Job control through HTTP against running processes: pause, resume, trigger, cancel."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.engine import Engine

from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until


def start(processes: Processes) -> Api:
    processes.start("w1", "worker", "--id", "w1")
    processes.start("d1", "dispatcher", "--id", "d1")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return connect_api(processes, port)


def succeeded(api: Api, job_id: int) -> list[dict[str, Any]]:
    return [r for r in api.executions(job_id) if r["status"] == "SUCCEEDED"]


def test_pause_stops_a_cron_job_and_resume_starts_it_again(
    processes: Processes, engine: Engine
) -> None:
    api = start(processes)
    job_id = api.post_job(
        {"jobName": "tick", "jobHandler": "demo.noop", "cronExpr": "* * * * * *"}
    ).json()["jobId"]
    wait_until(lambda: len(succeeded(api, job_id)) >= 2, 15, what="runs before pause")
    assert api.act(job_id, "pause").json()["status"] == "PAUSED"
    time.sleep(1.5)  # let a run already sent finish
    before = len(api.executions(job_id))
    time.sleep(2.5)
    assert len(api.executions(job_id)) == before, "a paused job fired"
    assert api.act(job_id, "resume").status_code == 200
    wait_until(lambda: len(succeeded(api, job_id)) >= before + 2, 15, what="runs after resume")
    assert api.act(job_id, "cancel").status_code == 200
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, CANCELLED_CRON), timeout=30)


def test_trigger_runs_a_job_now_besides_its_schedule(processes: Processes, engine: Engine) -> None:
    api = start(processes)
    job_id = api.post_job(
        {"jobName": "yearly", "jobHandler": "demo.echo", "cronExpr": "0 0 1 1 *"}
    ).json()["jobId"]
    triggered = api.act(job_id, "trigger")
    assert triggered.status_code == 202
    execution_id = triggered.json()["executionId"]
    wait_until(lambda: succeeded(api, job_id), 15, what="the manual run")
    assert succeeded(api, job_id)[0]["executionId"] == execution_id
    assert api.job(job_id)["status"] == "WAITING"
    # The manual run is the only one; the job waits for its yearly trigger.
    expected = Expectation([job_id], {"WAITING"}, {"SUCCEEDED"})
    assert assert_books(engine, expected, timeout=30).executions == 1


def test_cancel_ends_a_job_and_a_cancelled_job_cannot_resume(
    processes: Processes, engine: Engine
) -> None:
    api = start(processes)
    job_id = api.post_job(
        {"jobName": "tick", "jobHandler": "demo.noop", "cronExpr": "* * * * * *"}
    ).json()["jobId"]
    wait_until(lambda: succeeded(api, job_id), 15, what="a first run")
    assert api.act(job_id, "cancel").json()["status"] == "CANCELLED"
    time.sleep(1.5)
    settled = len(api.executions(job_id))
    time.sleep(2)
    assert len(api.executions(job_id)) == settled, "a cancelled job fired"
    refused = api.act(job_id, "resume")
    assert refused.status_code == 409
    assert "CANCELLED" in refused.json()["detail"]
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, CANCELLED_CRON), timeout=30)
