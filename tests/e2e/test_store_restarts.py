"""Stores restarting under a running stack: nothing is lost, nothing runs twice."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import wall_ms
from common.config import StoreSettings
from tests.books import Expectation, assert_books
from tests.e2e.counting import runs_key
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until

FINAL = {"SUCCEEDED", "FAILED"}
REPO = Path(__file__).resolve().parents[2]


# Each test restarts or cuts a server of the machine: never beside other tests.
pytestmark = pytest.mark.serial


def restart_rabbitmq(down_seconds: float) -> None:
    """Stop the broker application (queues and persistent messages stay) and start it."""
    if shutil.which("rabbitmqctl") is None:
        pytest.fail("rabbitmqctl is not on PATH: this test restarts the machine's RabbitMQ")
    subprocess.run(["rabbitmqctl", "stop_app"], check=True, capture_output=True, timeout=60)
    time.sleep(down_seconds)
    subprocess.run(["rabbitmqctl", "start_app"], check=True, capture_output=True, timeout=120)
    subprocess.run(["rabbitmqctl", "await_startup"], check=True, capture_output=True, timeout=120)


def submit_spread(
    api: Api, count: int, over_ms: int, params: dict[str, float] | None = None, after_ms: int = 500
) -> list[int]:
    start = wall_ms() + after_ms
    jobs = [
        {
            "jobName": f"c{i}",
            "jobHandler": "test.count",
            "triggerAt": start + i * over_ms // count,
            "params": params or {},
        }
        for i in range(count)
    ]
    response = httpx.post(
        f"{api.base}/openapi/jobs/batch",
        json={"jobs": jobs},
        headers={"Authorization": f"Bearer {api.api_key}"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    return [int(item["jobId"]) for item in response.json()["jobs"]]


def kill_mysql_connections(namespace: StoreSettings, rounds: int, every_s: float) -> int:
    """Kill every MySQL connection on the namespace's database, ``rounds`` times.

    The server stays up (it is shared), but each client sees what a restart shows it:
    its connections dropped mid-statement or mid-transaction.
    """
    admin = sa.create_engine(namespace.database_url, poolclass=sa.pool.NullPool)
    killed = 0
    with admin.connect() as conn:
        for _ in range(rounds):
            ids = conn.execute(
                sa.text(
                    "SELECT id FROM information_schema.PROCESSLIST "
                    "WHERE db = :db AND id <> CONNECTION_ID()"
                ),
                {"db": namespace.namespace},
            ).scalars()
            for connection_id in list(ids):
                try:
                    conn.execute(sa.text(f"KILL CONNECTION {int(connection_id)}"))
                    killed += 1
                except sa.exc.DBAPIError:
                    pass  # it ended by itself meanwhile
            time.sleep(every_s)
    admin.dispose()
    return killed


def start_counting_stack(processes: Processes) -> Api:
    processes.start("d", "dispatcher")
    for worker in ("w1", "w2"):
        # The handler module lives in the tests, not in the installed package.
        processes.start(
            worker,
            "worker",
            *("--id", worker, "--handlers", "tests.e2e.counting"),
            PYTHONPATH=str(REPO),
        )
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return connect_api(processes, port, probe_handler="test.count")


def assert_each_ran_once(api: Api, namespace: StoreSettings, job_ids: list[int]) -> None:
    wait_until(
        lambda: all(api.job(j)["status"] in FINAL for j in job_ids), 120, what="every job to end"
    )
    client = redis.Redis.from_url(namespace.redis_url)
    runs = {j: int(client.get(runs_key(namespace.namespace, j)) or 0) for j in job_ids}
    outcomes = {j: [e["status"] for e in api.executions(j)] for j in job_ids}
    twice = [j for j, n in runs.items() if n > 1]
    not_succeeded = {j: o for j, o in outcomes.items() if o != ["SUCCEEDED"]}
    print(f"runs: {sorted(set(runs.values()))}; not succeeded: {not_succeeded}")
    assert not twice, f"jobs that ran twice: {twice}"
    assert not not_succeeded


# The restart alone may take up to 5 minutes before it fails by its own timeouts; the
# test's limit leaves room for it and for the run to settle after.
@pytest.mark.timeout(480)
def test_rabbitmq_restart_mid_run(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    api = start_counting_stack(processes)
    job_ids = submit_spread(api, 300, over_ms=8_000)
    # Running when the broker goes: their deliveries come back while they still run.
    job_ids += submit_spread(api, 6, over_ms=200, params={"seconds": 4}, after_ms=1_500)
    time.sleep(3)
    restart_rabbitmq(down_seconds=3)
    assert_each_ran_once(api, namespace, job_ids)
    assert_books(engine, Expectation(job_ids, execution_statuses={"SUCCEEDED"}), timeout=30)


def test_mysql_connections_dropped_mid_run(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    api = start_counting_stack(processes)
    job_ids = submit_spread(api, 300, over_ms=8_000)
    time.sleep(2)
    assert kill_mysql_connections(namespace, rounds=6, every_s=0.5) > 0
    assert_each_ran_once(api, namespace, job_ids)
    assert_books(engine, Expectation(job_ids, execution_statuses={"SUCCEEDED"}), timeout=30)
