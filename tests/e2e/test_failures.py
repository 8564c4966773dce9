"""Processes killed with real signals: nothing is lost and nothing runs twice."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import redis
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.keys import RedisKeys
from tests.books import Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_healthy, wait_until
from tests.witnesses import Witnesses, read_effects

REPO = Path(__file__).resolve().parents[2]


def start_api(processes: Processes) -> Api:
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return connect_api(processes, port)


def noop_jobs(api: Api, count: int) -> list[int]:
    return [
        api.post_job({"jobName": f"n{i}", "jobHandler": "demo.noop"}).json()["jobId"]
        for i in range(count)
    ]


def all_succeeded(api: Api, job_ids: list[int]) -> bool:
    return all(api.job(j)["status"] == "SUCCEEDED" for j in job_ids)


def test_second_dispatcher_takes_over_when_the_leader_is_killed(
    processes: Processes, engine: Engine
) -> None:
    processes.start("worker", "worker", "--id", "w1")
    processes.start("d1", "dispatcher", "--id", "d1")
    wait_until(lambda: "lease acquired" in processes.log("d1"), 20, what="d1 to lead")
    processes.start("d2", "dispatcher", "--id", "d2")
    api = start_api(processes)
    first = noop_jobs(api, 5)
    wait_until(lambda: all_succeeded(api, first), 20, what="jobs under d1")
    processes.signal("d1", signal.SIGKILL)
    second = noop_jobs(api, 5)
    wait_until(lambda: all_succeeded(api, second), 30, what="jobs after d1 died")
    assert "lease acquired" in processes.log("d2")
    for job_id in first + second:
        assert len(api.executions(job_id)) == 1
    assert_books(engine, Expectation(first + second, execution_statuses={"SUCCEEDED"}), timeout=30)


def test_killed_worker_loses_its_running_job_and_its_queue_moves(
    processes: Processes, engine: Engine
) -> None:
    # Round robin splits the 4 jobs 2/2 for sure; the equal-cost score also weighs each
    # worker's CPU idle, which on one busy host can tip a pick either way.
    processes.start("d", "dispatcher", "--strategy", "round_robin")
    processes.start("w1", "worker", "--id", "w1", "--capacity", "1")
    processes.start("w2", "worker", "--id", "w2", "--capacity", "1")
    api = start_api(processes)
    # The API answers once one worker registered: the split needs both live (consuming,
    # and seen by the dispatcher's worker view, which it reloads every 0.5 s).
    wait_until(lambda: all("consuming" in processes.log(w) for w in ("w1", "w2")), 20)
    time.sleep(1.0)
    sleepers = [
        api.post_job(
            {"jobName": f"s{i}", "jobHandler": "demo.sleep", "params": {"seconds": 4}}
        ).json()["jobId"]
        for i in range(4)
    ]
    on_w1 = wait_until(
        lambda: (
            [j for j in sleepers if (api.job(j)["lastExecution"] or {}).get("workerId") == "w1"]
            if all(api.job(j)["lastExecution"] for j in sleepers)
            else None
        ),
        20,
        what="executions to be assigned",
    )
    assert len(on_w1) == 2, "round robin should split 4 jobs 2/2"
    wait_until(lambda: "consuming" in processes.log("w1"), 10)
    processes.signal("w1", signal.SIGKILL)
    outcomes = {
        j: api.wait_status(j, {"SUCCEEDED", "FAILED"}, timeout=60)["status"] for j in sleepers
    }
    lost = [j for j in on_w1 if api.executions(j)[0]["status"] == "LOST"]
    assert len(lost) == 1, "w1 was running exactly one job when it died"
    assert outcomes[lost[0]] == "FAILED"
    moved = [j for j in on_w1 if j not in lost]
    assert outcomes[moved[0]] == "SUCCEEDED"
    assert api.executions(moved[0])[0]["workerId"] == "w2"
    assert sum(1 for s in outcomes.values() if s == "SUCCEEDED") == 3
    # The run w1 died in is LOST and, with no retry allowed, fails its job; the rest
    # (the one moved off w1 with them) each succeed in one execution.
    assert_books(
        engine,
        Expectation(lost, {"FAILED"}, {"LOST"}),
        Expectation([j for j in sleepers if j not in lost], execution_statuses={"SUCCEEDED"}),
        timeout=30,
    )


def test_a_run_lost_with_its_killed_worker_is_retried_on_another(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    processes.start("d", "dispatcher")
    processes.start("w1", "worker", "--id", "w1", "--capacity", "1")
    api = start_api(processes)
    body = {
        "jobName": "s",
        "jobHandler": "demo.sleep",
        "params": {"seconds": 3},
        "maxRetries": 1,
        "retryBackoffSeconds": 1,
    }
    job_id = api.post_job(body).json()["jobId"]
    first = wait_until(lambda: api.job(job_id)["lastExecution"], 20, what="the first run")
    client = redis.Redis.from_url(namespace.redis_url)
    started = RedisKeys(namespace.namespace).execution_started(first["executionId"])
    wait_until(lambda: client.exists(started), 20, what="w1 to start the run")
    client.close()
    processes.start("w2", "worker", "--id", "w2", "--capacity", "1")
    wait_until(lambda: "consuming" in processes.log("w2"), 20, what="w2 to consume")
    processes.signal("w1", signal.SIGKILL)
    assert api.wait_status(job_id, {"SUCCEEDED", "FAILED"}, timeout=60)["status"] == "SUCCEEDED"
    retry, lost = api.executions(job_id)
    assert (lost["attempt"], lost["status"], lost["workerId"]) == (1, "LOST", "w1")
    assert (retry["attempt"], retry["status"], retry["workerId"]) == (2, "SUCCEEDED", "w2")
    books = assert_books(
        engine, Expectation([job_id], execution_statuses={"LOST", "SUCCEEDED"}), timeout=30
    )
    assert books.outcomes == {"LOST": 1, "SUCCEEDED": 1}


def test_sigterm_drains_a_worker_before_it_exits(processes: Processes, engine: Engine) -> None:
    processes.start("d", "dispatcher")
    worker = processes.start("w1", "worker", "--id", "w1")
    api = start_api(processes)
    job_id = api.post_job(
        {"jobName": "s", "jobHandler": "demo.sleep", "params": {"seconds": 2}}
    ).json()["jobId"]
    wait_until(lambda: api.job(job_id)["lastExecution"], 10, what="dispatch")
    wait_until(lambda: "consuming" in processes.log("w1"), 10)
    processes.signal("w1", signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert api.wait_status(job_id, {"SUCCEEDED", "FAILED"})["status"] == "SUCCEEDED"
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=30)


def test_long_run_is_acked_early_and_still_reports(processes: Processes, engine: Engine) -> None:
    processes.start("d", "dispatcher")
    processes.start("w1", "worker", "--id", "w1", KAIROS_ACK_DEADLINE_SECONDS="1")
    api = start_api(processes)
    job_id = api.post_job(
        {"jobName": "long", "jobHandler": "demo.sleep", "params": {"seconds": 4}}
    ).json()["jobId"]
    wait_until(lambda: "long-running deliveries early" in processes.log("w1"), 10)
    assert api.job(job_id)["status"] == "RUNNING"
    assert api.wait_status(job_id, {"SUCCEEDED", "FAILED"})["status"] == "SUCCEEDED"
    assert len(api.executions(job_id)) == 1
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=30)


def test_a_long_run_acked_early_is_settled_when_its_worker_restarts_with_the_same_id(
    processes: Processes, engine: Engine
) -> None:
    processes.start("d", "dispatcher")
    processes.start("w1", "worker", "--id", "w1", KAIROS_ACK_DEADLINE_SECONDS="1")
    api = start_api(processes)
    body = {
        "jobName": "long",
        "jobHandler": "demo.sleep",
        "params": {"seconds": 30},
        "maxRetries": 1,
        "retryBackoffSeconds": 1,
    }
    job_id = api.post_job(body).json()["jobId"]
    wait_until(lambda: "long-running deliveries early" in processes.log("w1"), 20)
    processes.signal("w1", signal.SIGKILL)
    # Back within the staleness window, under the same id: no delivery comes back, and
    # the leader never sees w1 dead.
    processes.start("w1-again", "worker", "--id", "w1")
    wait_until(
        lambda: len(api.executions(job_id)) == 2, 40, what="the interrupted run to be retried"
    )
    retry, lost = api.executions(job_id)
    assert (lost["attempt"], lost["status"]) == (1, "LOST")
    assert "restarted" in lost["message"]
    assert retry["attempt"] == 2


def test_worker_reconnects_when_the_broker_drops_its_connection(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    ledger = processes.log_dir / "ledger.txt"
    processes.env["KAIROS_CHAOS_LEDGER"] = str(ledger)
    processes.start("d", "dispatcher")
    # The ledger's handler sleeps like demo.sleep, then writes down that it ran.
    handlers = "services.worker.demo,tests.chaos.ledger"
    processes.start("w1", "worker", "--id", "w1", "--handlers", handlers, PYTHONPATH=str(REPO))
    api = start_api(processes)
    slow = api.post_job(
        {"jobName": "slow", "jobHandler": "chaos.effect", "params": {"seconds": 8}}
    ).json()["jobId"]
    running = wait_until(lambda: api.job(slow)["lastExecution"], 60, what="the run to be sent")
    client = redis.Redis.from_url(namespace.redis_url)
    started = RedisKeys(namespace.namespace).execution_started(running["executionId"])
    wait_until(lambda: client.exists(started), 60, what="w1 to start the run")
    client.close()
    # The connection drops mid-run: the message comes back to the same process, whose
    # copy waits for the run going on and reports it; the handler is not called again.
    assert close_connections(namespace, "kairos worker w1") >= 1
    wait_until(
        lambda: "worker lost a store" in processes.log("w1"), 15, what="the worker to notice"
    )
    later = noop_jobs(api, 3)
    wait_until(lambda: all_succeeded(api, [slow, *later]), 60, what="jobs after the reconnect")
    assert processes.running["w1"].poll() is None, "the worker process must survive"
    processes.signal("w1", signal.SIGTERM)  # quiet: a late copy would have run by now
    processes.running["w1"].wait(timeout=45)
    assert [e["status"] for e in api.executions(slow)] == ["SUCCEEDED"]
    assert [e.execution_id for e in read_effects(ledger) if e.job_id == slow] == [
        running["executionId"]
    ], "one handler call, of the one execution"
    # Only the slow job's handler writes the ledger.
    assert_books(
        engine,
        Expectation([slow], execution_statuses={"SUCCEEDED"}),
        timeout=30,
        witnesses=lambda: Witnesses(effects=read_effects(ledger)),
    )
    assert_books(engine, Expectation(later, execution_statuses={"SUCCEEDED"}), timeout=30)


def close_connections(settings: StoreSettings, name: str) -> int:
    """Close, through the management API, every connection the broker knows by ``name``."""
    base, auth = "http://127.0.0.1:15672", ("guest", "guest")
    listed = wait_until(
        lambda: [
            c
            for c in httpx.get(f"{base}/api/connections", auth=auth, timeout=10).json()
            if c.get("vhost") == settings.namespace
            and (c.get("client_properties") or {}).get("connection_name") == name
        ],
        15,
        what=f"connection {name!r} in the management API",
    )
    for connection in listed:
        httpx.delete(
            f"{base}/api/connections/{quote(connection['name'], safe='')}", auth=auth, timeout=10
        )
    return len(listed)


def test_api_exits_cleanly_on_sigterm(processes: Processes) -> None:
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    wait_healthy(port)
    processes.signal("api", signal.SIGTERM)
    assert processes.running["api"].wait(timeout=20) == 0
    assert "api stopped on signal 15" in processes.log("api")
