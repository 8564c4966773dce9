"""Executions whose dispatch message is lost: the reconciler and the operator commands.

A worker with one slot and a prefetch of one runs a sleeper while the next job's message
waits in its queue; the test purges the queue, as a lost message would leave things:
the execution is QUEUED on a live worker and nothing will ever run it.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
import redis
from sqlalchemy.engine import Engine

from common.broker import connect
from common.config import StoreSettings
from common.keys import RedisKeys
from common.topology import worker_queue
from tests.books import Expectation, assert_books
from tests.e2e.harness import KAIROS, Api, Processes, connect_api, free_port, wait_until


def start_stack(processes: Processes, reconcile_after: str) -> tuple[Api, int]:
    metrics = free_port()
    processes.start(
        "d",
        "dispatcher",
        "--metrics-port",
        str(metrics),
        KAIROS_RECONCILE_AFTER_SECONDS=reconcile_after,
    )
    processes.start("w1", "worker", "--id", "w1", "--capacity", "1", "--prefetch", "1")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    api = connect_api(processes, port)
    wait_until(lambda: "consuming" in processes.log("w1"), 20, what="w1 to consume")
    return api, metrics


def lose_next_dispatch(
    api: Api, namespace: StoreSettings, body: dict[str, Any]
) -> tuple[int, int, str]:
    """Run a sleeper on w1, submit ``body``, purge its message; (sleeper, job, execution)."""
    sleeper = api.post_job(
        {"jobName": "sleeper", "jobHandler": "demo.sleep", "params": {"seconds": 2}}
    ).json()["jobId"]
    first = wait_until(lambda: api.job(sleeper)["lastExecution"], 20, what="the sleeper's run")
    client = redis.Redis.from_url(namespace.redis_url)
    started = RedisKeys(namespace.namespace).execution_started(first["executionId"])
    wait_until(lambda: client.exists(started), 20, what="the sleeper to start")
    client.close()
    job_id = api.post_job(body).json()["jobId"]
    execution = wait_until(
        lambda: queued_on_w1(api, job_id), 20, what="the job's execution to be queued on w1"
    )
    connection = connect(namespace, "test purge")
    try:
        purged = connection.channel().queue_purge(worker_queue("w1")).method.message_count
    finally:
        connection.close()
    assert purged == 1, "the job's dispatch message waited in w1's queue"
    return sleeper, job_id, str(execution["executionId"])


def queued_on_w1(api: Api, job_id: int) -> dict[str, Any] | None:
    """The job's execution once it waits in w1's queue; fails at once if it ran instead."""
    execution = api.job(job_id)["lastExecution"]
    if execution is None:
        return None
    assert execution["status"] in {"SCHEDULED", "QUEUED"}, (
        f"the job's run went on to {execution['status']} before its message could be "
        "lost: it was sent only once the sleeper had ended"
    )
    return execution if execution["status"] == "QUEUED" else None


def reconciled(metrics_port: int, cause: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
    for line in text.splitlines():
        if line.startswith(f'kairos_executions_reconciled_total{{cause="{cause}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_the_reconciler_settles_a_lost_dispatch_and_the_retry_runs(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    api, metrics = start_stack(processes, reconcile_after="2")
    body = {"jobName": "lost", "jobHandler": "demo.noop", "maxRetries": 1}
    sleeper, job_id, lost_id = lose_next_dispatch(api, namespace, body)
    api.wait_status(job_id, {"SUCCEEDED", "FAILED"}, timeout=40)
    retry, first = api.executions(job_id)
    assert (first["executionId"], first["status"]) == (lost_id, "LOST")
    assert "never started" in first["message"]
    assert (retry["attempt"], retry["status"]) == (2, "SUCCEEDED")
    assert reconciled(metrics, "never_started") == 1
    assert reconciled(metrics, "unreported_result") == 0
    assert "recording it LOST" in processes.log("d")
    assert_books(
        engine,
        Expectation([sleeper], execution_statuses={"SUCCEEDED"}),
        Expectation([job_id], execution_statuses={"LOST", "SUCCEEDED"}),
        timeout=10,
    )


def kairos(processes: Processes, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KAIROS, *args], env=processes.env, capture_output=True, text=True, timeout=60
    )


def test_an_operator_lists_and_requeues_a_stuck_execution(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    api, _ = start_stack(processes, reconcile_after="0")
    sleeper, requeued_job, requeued = lose_next_dispatch(
        api, namespace, {"jobName": "r", "jobHandler": "demo.noop"}
    )
    api.wait_status(sleeper, {"SUCCEEDED"})
    shown = processes.run("executions", "stuck", "--older-than", "0s", "-o", "json")
    listed = json.loads(shown)["executions"]
    assert [(r["executionId"], r["run"], r["workerId"]) for r in listed] == [
        (requeued, "never_started", "w1")
    ]
    processes.run("executions", "requeue", requeued)
    api.wait_status(requeued_job, {"SUCCEEDED", "FAILED"})
    assert [e["executionId"] for e in api.executions(requeued_job)] == [requeued]
    assert_books(
        engine,
        Expectation([sleeper, requeued_job], execution_statuses={"SUCCEEDED"}),
        timeout=10,
    )


def test_an_operator_fails_a_stuck_execution_which_then_cannot_be_requeued(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    # A stack of its own: once w1 has timed a sleeper, the leader sends nothing to wait
    # behind it beyond its horizon, and whether one more run fits is a matter of
    # milliseconds of measured lag (the run is then sent once the sleeper ends, and is
    # never seen QUEUED). A worker that has timed nothing takes one run ahead per slot.
    api, _ = start_stack(processes, reconcile_after="0")
    sleeper, failed_job, failed = lose_next_dispatch(
        api, namespace, {"jobName": "f", "jobHandler": "demo.noop"}
    )
    out = processes.run("executions", "fail", failed, "--reason", "its message was lost")
    assert "recorded FAILED" in out
    job = api.wait_status(failed_job, {"SUCCEEDED", "FAILED"})
    assert job["status"] == "FAILED"
    assert job["lastExecution"]["message"] == "failed by an operator: its message was lost"

    again = kairos(processes, "executions", "requeue", failed)
    assert again.returncode == 2
    assert "has already ended" in again.stderr
    assert_books(
        engine,
        Expectation([sleeper], execution_statuses={"SUCCEEDED"}),
        Expectation([failed_job], {"FAILED"}, {"FAILED"}),
        timeout=10,
    )
