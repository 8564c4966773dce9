"""`kairos up` driven over HTTP: jobs run, fail, repeat, and call back signed."""

from __future__ import annotations

import json
import re
import signal
from typing import Any

import httpx
import psutil
import pytest
from sqlalchemy.engine import Engine

from services.notifier.signing import verify
from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, CallbackReceiver, Processes, connect_api, free_port, wait_until


@pytest.fixture
def api(processes: Processes) -> Api:
    port = free_port()
    processes.start("up", "up", "--port", str(port))
    return connect_api(processes, port)


def test_one_shot_job_succeeds_and_its_signed_callback_arrives(
    api: Api, receiver: CallbackReceiver, engine: Engine
) -> None:
    created = api.post_job(
        {
            "jobName": "report",
            "jobHandler": "demo.echo",
            "params": {"day": "2026-11-30"},
            "callbackUrl": receiver.url,
        }
    )
    assert created.status_code == 202
    job_id = created.json()["jobId"]
    job = api.wait_status(job_id, {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED"
    assert job["lastExecution"]["result"] == {"day": "2026-11-30"}
    wait_until(lambda: receiver.received, 15, what="the callback")
    callback = receiver.received[0]
    headers = {k.lower(): v for k, v in callback.headers.items()}
    assert verify(
        api.signing_secret,
        headers["webhook-id"],
        int(headers["webhook-timestamp"]),
        callback.body,
        headers["webhook-signature"],
    )
    assert headers["user-agent"].startswith("Kairos-Webhooks/")
    envelope = json.loads(callback.body)
    assert envelope["type"] == "execution.finished"
    payload = envelope["data"]
    assert payload["jobId"] == job_id
    assert payload["status"] == "SUCCEEDED"
    assert payload["executionId"] == job["lastExecution"]["executionId"]
    assert payload["result"] == {"day": "2026-11-30"}
    assert set(payload) == {
        "jobId",
        "jobName",
        "clientRequestId",
        "executionId",
        "attempt",
        "status",
        "message",
        "result",
        "triggerTime",
        "startedAt",
        "endedAt",
    }
    books = assert_books(
        engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=30
    )
    assert (books.executions, books.deliveries) == (1, 1)


def test_failing_handler_gives_failed_with_its_message(api: Api, engine: Engine) -> None:
    job_id = api.post_job(
        {"jobName": "f", "jobHandler": "demo.fail", "params": {"message": "no disk"}}
    ).json()["jobId"]
    job = api.wait_status(job_id, {"SUCCEEDED", "FAILED"})
    assert job["status"] == "FAILED"
    assert "no disk" in job["lastExecution"]["message"]
    assert_books(engine, Expectation([job_id], {"FAILED"}, {"FAILED"}), timeout=30)


def test_cron_job_runs_repeatedly(api: Api, engine: Engine) -> None:
    job_id = api.post_job(
        {"jobName": "tick", "jobHandler": "demo.noop", "cronExpr": "* * * * * *"}
    ).json()["jobId"]
    runs = wait_until(
        lambda: [e for e in api.executions(job_id) if e["status"] == "SUCCEEDED"][2:],
        20,
        what="three cron runs",
    )
    assert runs
    times = [e["triggerTime"] for e in api.executions(job_id)]
    assert len(times) == len(set(times)), "a trigger ran twice"
    assert api.job(job_id)["status"] in {"WAITING", "RUNNING"}
    # While it runs, a trigger may be under way, but none stuck; a run still QUEUED or
    # due (FORBID overlap, the default) may make the next trigger SKIPPED.
    running = Expectation(
        [job_id], {"WAITING", "RUNNING"}, {"SUCCEEDED", "SKIPPED"}, in_flight_ms=15_000
    )
    assert_books(engine, running, timeout=30)
    assert api.act(job_id, "cancel").status_code == 200
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, CANCELLED_CRON), timeout=30)


def test_create_is_idempotent_and_bad_input_writes_nothing(api: Api, engine: Engine) -> None:
    body = {"jobName": "once", "jobHandler": "demo.noop", "clientRequestId": "order-42"}
    first = api.post_job(body)
    again = api.post_job(body)
    clash = api.post_job({**body, "params": {"other": True}})
    assert (first.status_code, again.status_code, clash.status_code) == (202, 202, 422)
    assert again.headers.get("idempotent-replayed") == "true"
    assert first.headers.get("idempotent-replayed") is None
    assert again.json()["jobId"] == first.json()["jobId"]
    bad: list[dict[str, Any]] = [
        {"jobName": "x", "jobHandler": "no.such.handler"},
        {"jobName": "x", "jobHandler": "demo.noop", "cronExpr": "every day"},
        {"jobName": "x", "jobHandler": "demo.noop", "params": {"b": "x" * 70_000}},
        {"jobName": "x", "jobHandler": "demo.noop", "callbackUrl": "file:///etc/passwd"},
        {"jobHandler": "demo.noop"},
        {"jobName": ["x"], "jobHandler": "demo.noop"},
    ]
    for body_ in bad:
        response = api.post_job(body_)
        assert response.status_code == 422, body_
        assert response.json()["detail"]
    next_id = api.post_job({"jobName": "after", "jobHandler": "demo.noop"}).json()["jobId"]
    assert next_id == first.json()["jobId"] + 1, "a rejected request wrote a row"
    stored = Expectation([first.json()["jobId"], next_id], execution_statuses={"SUCCEEDED"})
    assert_books(engine, stored, timeout=30)


def test_up_stops_every_child_on_sigterm(processes: Processes) -> None:
    """Each child stops by itself on the SIGTERM it is passed: one that ignored it would
    be killed after the grace, without the line that says it stopped."""
    port = free_port()
    up = processes.start("up", "up", "--port", str(port), "--workers", "2", "--notifiers", "2")
    connect_api(processes, port)
    children = psutil.Process(up.pid).children()
    assert len(children) == 6  # API, dispatcher, two workers, two notifiers
    processes.signal("up", signal.SIGTERM)
    assert up.wait(timeout=60) == 0
    log = processes.log("up")
    assert re.search(r"dispatcher \S+ stopped", log), log
    assert len(re.findall(r"worker \S+ stopped", log)) == 2, log
    assert log.count("notifier stopped") == 2, log
    assert "Finished server process" in log  # uvicorn, once the API's requests ended
    assert not any(child.is_running() for child in children)


def test_up_restarts_a_child_that_dies(processes: Processes, engine: Engine) -> None:
    port = free_port()
    up = processes.start("up", "up", "--port", str(port), "--workers", "1")
    api = connect_api(processes, port)

    def workers() -> list[psutil.Process]:
        found = []
        for child in psutil.Process(up.pid).children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE and "worker" in child.cmdline():
                    found.append(child)
            except psutil.Error:
                continue  # it ended while we looked
        return found

    [first] = workers()
    first.send_signal(signal.SIGKILL)  # a child this test's `kairos up` started
    wait_until(lambda: [w for w in workers() if w.pid != first.pid], 20, what="a new worker")
    assert "worker-1 exited with -9; restarting it" in processes.log("up")
    # The restarted worker serves metrics on the port `kairos up` kept bound for it.
    metrics = re.search(r"http://127\.0\.0\.1:(\d+)/metrics \(\S+-w1;", processes.log("up"))
    assert metrics is not None, processes.log("up")
    healthz = f"http://127.0.0.1:{metrics.group(1)}/healthz"
    assert wait_until(lambda: _answers(healthz), 30, what="the restarted worker's /healthz")
    job_id = api.post_job({"jobName": "after", "jobHandler": "demo.noop"}).json()["jobId"]
    assert api.wait_status(job_id, {"SUCCEEDED", "FAILED"}, timeout=60)["status"] == "SUCCEEDED"
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
