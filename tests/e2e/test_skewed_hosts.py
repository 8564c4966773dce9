"""Hosts whose wall clocks are an hour off run jobs on time: Kairos takes heartbeat ages,
due checks and firing times from one clock (Redis TIME), never from a host's own.

The API and the dispatcher run an hour ahead of the truth, one worker an hour behind and
the other an hour ahead (``tests/e2e/skewed_clock.py``); this test, Redis and MySQL keep
the true time. Read by a host's clock, a job submitted "now" would be due in an hour, a
trigger a few seconds off would fire at once, and one worker's heartbeats would be an
hour old (never routed to) while the other's would never age.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.timefmt import iso_ms, parse_instant
from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until

HOUR_S = 3_600
# Far less than the hour of skew, far more than a busy machine's delays.
CLOSE_MS = 60_000
# How far the cluster clock may be from this host's own (the same host's clock, read
# through Redis TIME with up to half a round trip's error, then run on the monotonic).
CLOCK_READ_MS = 50
REPO = str(Path(__file__).resolve().parents[2])
SKEWS = {"api": HOUR_S, "d1": HOUR_S, "w1": -HOUR_S, "w2": HOUR_S}


def start_skewed(processes: Processes, name: str, *args: str) -> None:
    """Start ``kairos <args>`` as ``name``, with its wall clock off by ``SKEWS[name]``."""
    command = [sys.executable, "-m", "tests.e2e.skewed_clock", str(SKEWS[name]), *args]
    processes.start_command(name, command, PYTHONPATH=REPO)


def start_skewed_stack(processes: Processes) -> Api:
    for worker in ("w1", "w2"):
        start_skewed(processes, worker, "worker", "--id", worker, "--capacity", "4")
    start_skewed(processes, "d1", "dispatcher", "--id", "d1")
    port = free_port()
    start_skewed(processes, "api", "api", "--port", str(port))
    return connect_api(processes, port)


def logged_skew_s(processes: Processes, name: str) -> float:
    """How far the first time ``name`` logged is from the true time, in seconds."""
    first = wait_until(lambda: processes.log(name).split(" ", 1)[0], 30, what=f"{name} to log")
    return (parse_instant(first) - time.time() * 1000) / 1000


def heartbeat_ages_ms(engine: Engine) -> dict[str, int]:
    """Each worker's last heartbeat's age by MySQL's clock, signed (a stamp from the
    future is negative)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT worker_id, UNIX_TIMESTAMP(NOW(3)) * 1000 - last_heartbeat FROM workers")
        )
        return {str(worker): int(age) for worker, age in rows}


def workers_of(engine: Engine, job_ids: list[int]) -> set[str]:
    statement = sa.text(
        "SELECT DISTINCT worker_id FROM executions WHERE job_id IN :jobs"
    ).bindparams(sa.bindparam("jobs", expanding=True))
    with engine.connect() as conn:
        return {str(w) for w in conn.execute(statement, {"jobs": job_ids}).scalars()}


def sent_before(api: Api, job_id: int, at_ms: int) -> list[dict[str, object]]:
    """Polls until the job has ended; the executions seen sent to a worker before ``at_ms``
    by the true clock (a slow poll can miss an early run, never invent one: what an
    answer shows was so when the answer came back). A trigger claimed ahead of its time
    waits SCHEDULED in its dispatcher until then."""
    while True:
        job, runs = api.job(job_id), api.executions(job_id)
        seen_at = time.time() * 1000
        sent = [r for r in runs if r["status"] != "SCHEDULED"]
        if sent and seen_at < at_ms - CLOCK_READ_MS:
            return sent
        if job["status"] in {"SUCCEEDED", "FAILED", "CANCELLED"}:
            return []
        assert seen_at < at_ms + CLOSE_MS, f"job {job_id} has not run a minute past its time"
        time.sleep(0.05)


def test_hosts_an_hour_off_run_jobs_on_the_cluster_clock(
    processes: Processes, engine: Engine
) -> None:
    api = start_skewed_stack(processes)
    for name, skew in SKEWS.items():
        assert abs(logged_skew_s(processes, name) - skew) < CLOSE_MS / 1000, f"{name} not skewed"
    ages = heartbeat_ages_ms(engine)
    assert set(ages) == {"w1", "w2"} and all(abs(a) < CLOSE_MS for a in ages.values()), ages
    # Submitted "now" on an API an hour ahead: due now, not in an hour.
    at_once = [
        api.post_job(
            {"jobName": f"now-{n}", "jobHandler": "demo.sleep", "params": {"seconds": 1}}
        ).json()["jobId"]
        for n in range(8)
    ]
    at = int(time.time() * 1000) + 4_000
    later = api.post_job(
        {"jobName": "later", "jobHandler": "demo.noop", "triggerAt": iso_ms(at)}
    ).json()["jobId"]
    submitted = int(time.time() * 1000)
    cron = api.post_job(
        {"jobName": "cron", "jobHandler": "demo.noop", "cronExpr": "* * * * * *"}
    ).json()["jobId"]
    # A dispatcher an hour ahead fires it no earlier than its time.
    early = sent_before(api, later, at)
    assert not early, f"a trigger fired before its time: {early}"
    [run] = api.executions(later)
    assert run["status"] == "SUCCEEDED" and run["triggerTime"] == iso_ms(at)
    for job_id in at_once:
        assert api.wait_status(job_id, {"SUCCEEDED"}, 60)["status"] == "SUCCEEDED"
    # Both workers live to the leader: an hour behind is not an hour stale.
    assert workers_of(engine, at_once) == {"w1", "w2"}
    wait_until(lambda: len(api.executions(cron)) >= 3, 30, what="three cron runs")
    assert api.act(cron, "cancel").status_code == 200
    ended = int(time.time() * 1000)
    triggers = [parse_instant(r["triggerTime"]) for r in api.executions(cron)]
    assert all(submitted - 1_000 <= t <= ended + 2_000 for t in triggers), (
        "cron fired off the true time"
    )
    ages = heartbeat_ages_ms(engine)
    assert all(abs(a) < CLOSE_MS for a in ages.values()), f"heartbeat ages {ages}"
    assert_books(
        engine, Expectation([*at_once, later], execution_statuses={"SUCCEEDED"}), timeout=30
    )
    assert_books(engine, Expectation([cron], {"CANCELLED"}, CANCELLED_CRON), timeout=30)
