"""The OpenAPI document is the contract: schemathesis, run against a live `kairos api`
from its own /openapi.json, finds no server error and no answer the document does not
describe, over every operation, its examples, edge cases, random inputs and the
document's links.

The run is bounded by a fixed number of examples per operation and a fixed seed, so
it does the same work every time. Schema-valid input the API still refuses (a handler
no worker registers, a cron that never fires, a cursor it did not hand out) is refused
by design with a documented 422, so that one check is left out.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tests.e2e.harness import Processes, free_port, wait_healthy
from tests.integration.helpers import register_worker

SCHEMATHESIS = str(Path(sys.executable).parent / "st")
# README, "Contract tests", says how many cases a run makes; it must make at least this.
MIN_CASES = 1_000
EXAMPLES_PER_OPERATION = 60
SEED = 1


# The run does a fixed amount of work whose time grows with the operations the document
# has and with what else the box runs: the subprocess's own bound decides, not the
# suite's default per-test timeout.
@pytest.mark.timeout(960)
def test_schemathesis_finds_nothing_against_the_live_api(
    processes: Processes, engine: Engine
) -> None:
    register_worker(engine)  # the demo handlers, so creates can succeed and links lead on
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    base = wait_healthy(port)
    api_key = json.loads(processes.run("app", "create", "contract", "--handlers", "*"))["apiKey"]
    done = subprocess.run(
        [
            SCHEMATHESIS,
            "run",
            f"{base}/openapi.json",
            "--header",
            f"Authorization: Bearer {api_key}",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            str(EXAMPLES_PER_OPERATION),
            "--seed",
            str(SEED),
            "--workers",
            "1",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=processes.env,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    found = re.search(r"(\d+) generated, (\d+) passed", report)
    assert found is not None, report[-4000:]
    generated, passed = int(found[1]), int(found[2])
    assert generated == passed >= MIN_CASES, report[-4000:]
    print(f"schemathesis: {generated} cases, all passed")
