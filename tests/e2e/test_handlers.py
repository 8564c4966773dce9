"""Which handlers a worker registers: only the modules it is given."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.e2e.harness import Processes, wait_until

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


def test_a_worker_with_no_handler_module_refuses_to_start(processes: Processes) -> None:
    worker = processes.start("w1", "worker", "--id", "w1", KAIROS_HANDLERS="")
    assert worker.wait(timeout=60) == 2
    log = processes.log("w1")
    assert "--handlers" in log and "services.worker.demo" in log
