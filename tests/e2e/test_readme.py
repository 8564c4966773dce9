"""README's first steps work as written: `kairos up --handlers MODULE`, its banner, the
first job's lines and those of "Using the API", run by bash as a new user would (only
the port differs)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import Processes, free_port, wait_healthy, wait_until

README = Path(__file__).resolve().parents[2] / "README.md"


def first_steps() -> tuple[str, str]:
    """The `kairos up` line and the shell lines of README's "First job"."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### First job") :]
    section = section[: section.index("\n## ")]
    blocks = re.findall(r"```\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2, "First job has the `kairos up` block, then the lines to run"
    return blocks[0].strip(), blocks[1]


def using_the_api() -> str:
    """The shell lines of README's "Using the API", which go on from the first job's."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Using the API") :]
    section = section[: section.index("| field | meaning |")]
    blocks = re.findall(r"```\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "Using the API has one block of lines to run"
    return str(blocks[0])


def test_the_readme_says_make_run_already_starts_the_stack() -> None:
    text = README.read_text(encoding="utf-8")
    first_job = text[text.index("### First job") :]
    assert "With `make run` going, skip to the lines below" in first_job[:400]
    assert "make run ARGS=" in text and "KAIROS_PORT" in text


def test_the_first_steps_of_the_readme_run_as_written(processes: Processes, engine: Engine) -> None:
    up, lines = first_steps()
    assert up == "kairos up --handlers services.worker.demo"
    port = free_port()
    processes.env.pop("KAIROS_HANDLERS", None)  # the flag alone names the handlers
    processes.start("up", *shlex.split(up)[1:], "--port", str(port))
    wait_healthy(port)
    banner = wait_until(
        lambda: "workers:" in processes.log("up") and processes.log("up"), 60, what="the banner"
    )
    ids = re.search(r"workers:\s+(\S+), (\S+) \(", banner)
    assert ids is not None, banner
    assert "rabbitmq ui:    http://127.0.0.1:15672 (user guest)" in banner
    assert "guest/guest" not in banner

    def workers_up() -> bool:
        with engine.connect() as conn:
            found = {r[0] for r in conn.execute(sa.text("SELECT worker_id FROM workers"))}
        return found == {ids.group(1), ids.group(2)}

    wait_until(workers_up, 60, what="the workers named in the banner to heartbeat")

    bin_dir = str(Path(sys.executable).parent)
    env = {**processes.env, "PATH": f"{bin_dir}:{processes.env.get('PATH', '')}"}
    script = "set -euo pipefail\n" + (lines + using_the_api()).replace(
        "127.0.0.1:8000", f"127.0.0.1:{port}"
    )
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert '"jobName":"report"' in done.stdout
    assert '"jobName":"weekday-report"' in done.stdout
    assert done.stdout.count("T07:00:00") + done.stdout.count("T08:00:00") >= 5, done.stdout

    with engine.connect() as conn:
        (job_id,) = conn.execute(sa.text("SELECT id FROM jobs WHERE job_name = 'report'")).one()
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=30)
    with engine.connect() as conn:
        result = conn.execute(
            sa.text("SELECT result FROM executions WHERE job_id = :id"), {"id": job_id}
        ).scalar_one()
        dead = conn.execute(sa.text("SELECT COUNT(*) FROM callback_deliveries")).scalar_one()
    assert json.loads(result) == {"day": "2026-11-30"}
    assert dead == 0, "the first job sends no callback that could end dead"
