"""Which handlers a worker registers: only the modules it is given."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import Processes, connect_api, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


def registered(engine: Engine, worker_id: str) -> list[str] | None:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT handlers FROM workers WHERE worker_id = :w"), {"w": worker_id}
        ).first()
    return None if row is None else list(json.loads(row.handlers))


def test_a_worker_registers_its_own_modules_and_no_demo_handlers(
    processes: Processes, engine: Engine
) -> None:
    processes.start(
        "w1",
        "worker",
        *("--id", "w1", "--handlers", "tests.e2e.counting"),
        PYTHONPATH=str(REPO),
    )
    handlers = wait_until(lambda: registered(engine, "w1"), 30, what="w1's heartbeat")
    assert handlers == ["test.count"]
    # It runs what it registered, and nothing takes a job for a demo handler.
    processes.start("d", "dispatcher")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    api = connect_api(processes, port, probe_handler="test.count")
    assert api.post_job({"jobName": "demo", "jobHandler": "demo.noop"}).status_code == 422
    job_id = api.post_job({"jobName": "counted", "jobHandler": "test.count"}).json()["jobId"]
    assert api.wait_status(job_id, {"SUCCEEDED", "FAILED"})["status"] == "SUCCEEDED"
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=30)


def test_a_worker_with_no_handler_module_refuses_to_start(processes: Processes) -> None:
    worker = processes.start("w1", "worker", "--id", "w1", KAIROS_HANDLERS="")
    assert worker.wait(timeout=60) == 2
    log = processes.log("w1")
    assert "--handlers" in log and "services.worker.demo" in log
