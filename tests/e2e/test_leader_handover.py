"""The leader killed while it holds triggers claimed ahead of their time: the standby
fires each once, late, as its misfire policy says."""

from __future__ import annotations

import signal
import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.timefmt import iso_ms
from tests.books import Expectation, assert_books
from tests.e2e.harness import Processes, connect_api, free_port, wait_until

JOBS = 6
# The triggers' time, from the test's first POST: the POSTs and d1's claim have until
# KILL_BEFORE_MS before it, however slow the machine is, before d1 is killed.
TRIGGER_AHEAD_MS = 9_000
KILL_BEFORE_MS = 2_000


def scheduled(engine: Engine) -> int:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT COUNT(*) FROM executions WHERE status = 'SCHEDULED'"))
        return int(found.scalar_one())


def runs(engine: Engine, job_ids: list[int]) -> list[tuple[int, str, int | None, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT job_id, status, dispatched_at, trigger_time FROM executions "
                "WHERE job_id IN :ids ORDER BY job_id"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": job_ids},
        ).all()
    return [(int(r[0]), str(r[1]), r[2], int(r[3])) for r in rows]


def test_a_standby_fires_the_killed_leaders_claimed_triggers_once_late_by_policy(
    processes: Processes, engine: Engine
) -> None:
    processes.start("w1", "worker", "--id", "w1", "--capacity", "8")
    # d1 claims 10 s ahead and holds a lease of 8 s: killed with the triggers claimed,
    # they come due while nobody leads, and d2 finds them late.
    processes.start(
        "d1", "dispatcher", "--id", "d1", KAIROS_CLAIM_WINDOW_MS="10000", KAIROS_LEASE_TTL_MS="8000"
    )
    wait_until(lambda: "lease acquired" in processes.log("d1"), 20, what="d1 to lead")
    processes.start("d2", "dispatcher", "--id", "d2")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    api = connect_api(processes, port)
    trigger_ms = int(time.time() * 1000) + TRIGGER_AHEAD_MS
    common = {
        "jobHandler": "demo.noop",
        "triggerAt": iso_ms(trigger_ms),
        "misfireThresholdSeconds": 1,
    }
    once = [
        api.post_job({"jobName": f"once-{n}", "misfirePolicy": "FIRE_ONCE", **common})
        for n in range(JOBS)
    ]
    skip = [
        api.post_job({"jobName": f"skip-{n}", "misfirePolicy": "SKIP", **common})
        for n in range(JOBS)
    ]
    once_ids = [r.json()["jobId"] for r in once]
    skip_ids = [r.json()["jobId"] for r in skip]
    kill_at = trigger_ms - KILL_BEFORE_MS
    wait_until(
        lambda: scheduled(engine) == 2 * JOBS,
        (kill_at - time.time() * 1000) / 1000,
        what="d1 to claim every trigger ahead",
    )
    # Not sooner: d2 takes the lease at least two thirds of its 8 s after the kill, and
    # must find the triggers later than their misfire threshold.
    time.sleep(max(0.0, (kill_at - time.time() * 1000) / 1000))
    processes.signal("d1", signal.SIGKILL)
    assert_books(engine, Expectation(once_ids, {"SUCCEEDED"}, {"SUCCEEDED"}), timeout=60)
    assert_books(engine, Expectation(skip_ids, {"FAILED"}, {"SKIPPED"}), timeout=30)
    fired = runs(engine, once_ids)
    assert [job for job, *_ in fired] == once_ids, "each trigger fired exactly once"
    assert all(d is not None and d - t > 1_000 for _, _, d, t in fired), "fired late, by d2"
    assert [job for job, *_ in runs(engine, skip_ids)] == skip_ids
    assert "lease acquired" in processes.log("d2")
