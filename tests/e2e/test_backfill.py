"""Backfill against running processes: two apps backfill several cron and fixed-rate
jobs at once, every past time runs exactly once (a handler's own ledger says so), a
second round runs nothing more, and another app's run is not held up behind them."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.chaos.ledger import Ledger
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until
from tests.witnesses import Witnesses

REPO = Path(__file__).resolve().parents[2]
MINUTE = 60_000
TIMES = 120  # per job: the last two hours, minute by minute


def start(processes: Processes, ledger: Path) -> tuple[Api, Api]:
    """An API, a dispatcher and two workers running the ledger handler; two apps."""
    for name in ("w1", "w2"):
        processes.start(
            name,
            *("worker", "--id", name, "--capacity", "4", "--handlers", "tests.chaos.ledger"),
            PYTHONPATH=str(REPO),
            KAIROS_CHAOS_LEDGER=str(ledger),
        )
    processes.start("d1", "dispatcher", "--id", "d1")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    first = connect_api(processes, port, probe_handler="chaos.effect")
    second = json.loads(processes.run("app", "create", "second", "--handlers", "*"))
    return first, Api(first.base, second["apiKey"], second["signingSecret"])


def backfill(api: Api, job_id: int, from_ms: int, to_ms: int) -> dict[str, Any]:
    response = httpx.post(
        f"{api.base}/openapi/jobs/{job_id}/backfill",
        json={"from": from_ms, "to": to_ms},
        headers={"Authorization": f"Bearer {api.api_key}"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    answer: dict[str, Any] = response.json()
    return answer


def db_now(engine: Engine) -> int:
    """Now in epoch ms (the jobs' times are this far in; the cluster clock is close)."""
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000")).scalar_one())


def backfill_rows(engine: Engine, job_ids: list[int]) -> list[sa.Row[Any]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT job_id, trigger_time, status, started_at FROM executions "
                    "WHERE backfill = 1 AND job_id IN :ids"
                ).bindparams(sa.bindparam("ids", expanding=True)),
                {"ids": job_ids},
            )
        )


def test_two_apps_backfill_at_once_each_time_runs_once_and_a_repeat_runs_nothing(
    processes: Processes, engine: Engine, tmp_path: Path
) -> None:
    ledger_path = tmp_path / "ledger"
    apps = start(processes, ledger_path)
    jobs: list[tuple[Api, int]] = []
    for api in apps:
        for body in (
            {"cronExpr": "* * * * *"},
            {"cronExpr": "* * * * *", "timezone": "America/New_York"},
            {"fixedRateSeconds": 60},
        ):
            full = {"jobName": "backfilled", "jobHandler": "chaos.effect", **body}
            full["params"] = {"seconds": 0.01}
            response = api.post_job(full)
            assert response.status_code == 202, response.text
            jobs.append((api, response.json()["jobId"]))
    now = db_now(engine)
    end = now - now % MINUTE - 5 * MINUTE  # well before every job's next trigger
    start_ms = end - TIMES * MINUTE
    # Each job: the whole range and two halves that overlap it, all at once.
    calls = [
        (api, job_id, lo, hi)
        for api, job_id in jobs
        for lo, hi in (
            (start_ms, end),
            (start_ms, end - 30 * MINUTE),
            (start_ms + 30 * MINUTE, end),
        )
    ]
    with ThreadPoolExecutor(max_workers=9) as pool:
        answers = list(pool.map(lambda c: (c[1], backfill(*c)), calls))
    ids = [job_id for _, job_id in jobs]
    for job_id in ids:
        mine = [a for j, a in answers if j == job_id]
        assert sum(a["created"] for a in mine) == TIMES, mine
    wait_until(
        lambda: (
            sum(r.status == "SUCCEEDED" for r in backfill_rows(engine, ids)) == TIMES * len(ids)
        ),
        120,
        what="every backfill run to succeed",
    )
    # A second round finds every time run and creates nothing.
    for api, job_id in jobs:
        again = backfill(api, job_id, start_ms, end)
        assert (again["created"], again["existing"]) == (0, TIMES)
    ledger = Ledger.read(ledger_path)
    assert len(backfill_rows(engine, ids)) == TIMES * len(ids)
    ran = {(e.job_id, e.trigger_time) for e in ledger.effects if e.trigger_time < end}
    assert len(ran) == TIMES * len(ids)
    for api, job_id in jobs:
        assert api.act(job_id, "cancel").status_code == 200
    assert_books(
        engine,
        Expectation(ids, {"CANCELLED"}, CANCELLED_CRON, callbacks="recorded"),
        timeout=60,
        witnesses=lambda: Witnesses(effects=Ledger.read(ledger_path).effects),
    )


def test_a_long_backfill_does_not_hold_up_another_apps_run(
    processes: Processes, engine: Engine, tmp_path: Path
) -> None:
    big, small = start(processes, tmp_path / "ledger")
    body = {"jobName": "slow", "jobHandler": "chaos.effect", "params": {"seconds": 0.1}}
    job_id = big.post_job({**body, "cronExpr": "* * * * *"}).json()["jobId"]
    now = db_now(engine)
    end = now - now % MINUTE - MINUTE
    # As many as one call may make: 1,000 runs of 0.1 s on 8 slots, about 12 s of
    # backlog for the big app.
    began = time.monotonic()
    assert backfill(big, job_id, end - 1000 * MINUTE, end)["created"] == 1000
    took = time.monotonic() - began
    wait_until(lambda: backfill_rows(engine, [job_id])[0:1], 10, what="the backfill rows")
    submitted = time.monotonic()
    other = small.post_job({**body, "params": {"seconds": 0}}).json()["jobId"]
    wait_until(
        lambda: small.executions(other) and small.executions(other)[0]["status"] == "SUCCEEDED",
        5,
        what="the other app's run, past the backlog",
    )
    print(
        f"backfill of 1,000 runs answered in {took:.2f} s; another app's run succeeded "
        f"{time.monotonic() - submitted:.2f} s after its submit, behind that backlog"
    )
    left = [r for r in backfill_rows(engine, [job_id]) if r.status != "SUCCEEDED"]
    assert len(left) > 100, "the backlog should still be going"
    assert big.act(job_id, "cancel").status_code == 200
    assert_books(
        engine,
        Expectation([job_id], {"CANCELLED"}, CANCELLED_CRON, callbacks="recorded"),
        Expectation([other], {"SUCCEEDED"}, {"SUCCEEDED"}, callbacks="recorded"),
        timeout=60,
    )
