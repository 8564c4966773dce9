"""Stores restarting under a running stack: nothing is lost, nothing runs twice, by the
books held against the handlers' own ledger once the workers have stopped."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import wall_ms
from common.config import StoreSettings
from tests.books import Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until
from tests.witnesses import Witnesses, read_effects

FINAL = {"SUCCEEDED", "FAILED"}
REPO = Path(__file__).resolve().parents[2]
WORKERS = ("w1", "w2")


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
            "jobHandler": "chaos.effect",
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
    processes.env["KAIROS_CHAOS_LEDGER"] = str(ledger_of(processes))
    processes.start("d", "dispatcher")
    for worker in WORKERS:
        # The handler module lives in the tests, not in the installed package.
        processes.start(
            worker,
            "worker",
            *("--id", worker, "--handlers", "tests.chaos.ledger"),
            PYTHONPATH=str(REPO),
        )
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return connect_api(processes, port, probe_handler="chaos.effect")


def ledger_of(processes: Processes) -> Path:
    """Where the handler writes each side effect it completed."""
    return processes.log_dir / "ledger.txt"


def assert_each_ran_once(
    api: Api, processes: Processes, engine: Engine, job_ids: list[int]
) -> None:
    """Every job ended with one SUCCEEDED execution, and, once the workers have stopped
    (a late copy has run by then), the ledger holds exactly one side effect per job."""
    wait_until(
        lambda: all(api.job(j)["status"] in FINAL for j in job_ids), 120, what="every job to end"
    )
    for worker in WORKERS:
        processes.signal(worker, signal.SIGTERM)
    for worker in WORKERS:
        processes.running[worker].wait(timeout=45)
    effects = read_effects(ledger_of(processes))
    runs = Counter(e.job_id for e in effects)
    outcomes = {j: [e["status"] for e in api.executions(j)] for j in job_ids}
    not_once = {j: runs[j] for j in job_ids if runs[j] != 1}
    not_succeeded = {j: o for j, o in outcomes.items() if o != ["SUCCEEDED"]}
    print(f"runs: {sorted({runs[j] for j in job_ids})}; not succeeded: {not_succeeded}")
    assert not not_once, f"jobs whose side effect did not happen exactly once: {not_once}"
    assert not not_succeeded
    assert_books(
        engine,
        Expectation(job_ids, execution_statuses={"SUCCEEDED"}),
        timeout=30,
        witnesses=lambda: Witnesses(effects=effects),
    )


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
    wait_until(lambda: read_effects(ledger_of(processes)), 60, what="the first runs")
    restart_rabbitmq(down_seconds=3)
    assert_each_ran_once(api, processes, engine, job_ids)


# Up to 120 s for every job to end, and the workers' drain: past the global 120 s.
@pytest.mark.timeout(300)
def test_mysql_connections_dropped_mid_run(
    processes: Processes, namespace: StoreSettings, engine: Engine
) -> None:
    api = start_counting_stack(processes)
    job_ids = submit_spread(api, 300, over_ms=8_000)
    wait_until(lambda: read_effects(ledger_of(processes)), 60, what="the first runs")
    assert kill_mysql_connections(namespace, rounds=6, every_s=0.5) > 0
    assert_each_ran_once(api, processes, engine, job_ids)
