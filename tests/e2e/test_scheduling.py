"""Scheduling semantics against running processes: retries, timeouts, misfires, overlap."""

from __future__ import annotations

import signal
import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.timefmt import iso_ms, parse_instant
from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until

# How long after the first missed trigger no dispatcher runs: past the jobs' 1 s misfire
# threshold, with room.
MISSED_MS = 3_000


def start(processes: Processes, *, dispatcher: bool = True) -> Api:
    processes.start("w1", "worker", "--id", "w1", "--capacity", "4")
    if dispatcher:
        processes.start("d1", "dispatcher", "--id", "d1")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return connect_api(processes, port)


def final(api: Api, job_id: int, timeout: float = 40) -> dict[str, object]:
    return api.wait_status(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout)


def test_failed_runs_are_retried_as_new_attempts_until_exhausted(
    processes: Processes, engine: Engine
) -> None:
    api = start(processes)
    job_id = api.post_job(
        {
            "jobName": "flaky",
            "jobHandler": "demo.fail",
            "params": {"message": "upstream 503"},
            "maxRetries": 2,
            "retryBackoffSeconds": 1,
        }
    ).json()["jobId"]
    assert final(api, job_id)["status"] == "FAILED"
    runs = api.executions(job_id)
    assert [r["attempt"] for r in runs] == [3, 2, 1]
    assert {r["status"] for r in runs} == {"FAILED"}
    assert len({r["executionId"] for r in runs}) == 3
    assert len({r["triggerTime"] for r in runs}) == 1
    books = assert_books(engine, Expectation([job_id], {"FAILED"}, {"FAILED"}), timeout=30)
    assert books.executions == 3


def test_run_past_its_timeout_is_timed_out(processes: Processes, engine: Engine) -> None:
    api = start(processes)
    job_id = api.post_job(
        {
            "jobName": "slow",
            "jobHandler": "demo.sleep",
            "params": {"seconds": 6},
            "timeoutSeconds": 1,
        }
    ).json()["jobId"]
    assert final(api, job_id)["status"] == "FAILED"
    [run] = api.executions(job_id)
    assert run["status"] == "TIMED_OUT"
    assert "timed out after 1 s" in run["message"]
    assert_books(engine, Expectation([job_id], {"FAILED"}, {"TIMED_OUT"}), timeout=30)


def test_one_shot_never_fires_before_its_trigger_time(processes: Processes, engine: Engine) -> None:
    api = start(processes)
    at = int(time.time() * 1000) + 2_500
    job_id = api.post_job(
        {"jobName": "later", "jobHandler": "demo.noop", "triggerAt": iso_ms(at)}
    ).json()["jobId"]
    assert final(api, job_id)["status"] == "SUCCEEDED"
    [run] = api.executions(job_id)
    assert parse_instant(run["dispatchedAt"]) >= parse_instant(run["triggerTime"])
    assert run["triggerTime"] == iso_ms(at)
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=30)


def next_triggers(engine: Engine, job_ids: list[int]) -> dict[int, int]:
    """Each job's next trigger time, as the jobs table holds it."""
    statement = sa.text("SELECT id, next_trigger_time FROM jobs WHERE id IN :ids").bindparams(
        sa.bindparam("ids", expanding=True)
    )
    with engine.connect() as conn:
        return {int(j): int(t) for j, t in conn.execute(statement, {"ids": job_ids})}


def runs_from(engine: Engine, job_id: int, first_ms: int) -> list[tuple[int, str, int | None]]:
    """(trigger time, status, dispatched at) of the job's executions triggered at
    ``first_ms`` or later, by trigger time."""
    statement = sa.text(
        "SELECT trigger_time, status, dispatched_at FROM executions "
        "WHERE job_id = :j AND trigger_time >= :t ORDER BY trigger_time"
    )
    with engine.connect() as conn:
        rows = conn.execute(statement, {"j": job_id, "t": first_ms})
        return [(int(t), str(s), d) for t, s, d in rows]


def test_triggers_missed_while_no_dispatcher_ran_follow_the_misfire_policy(
    processes: Processes, engine: Engine
) -> None:
    api = start(processes)
    common = {"jobHandler": "demo.noop", "cronExpr": "* * * * * *", "misfireThresholdSeconds": 1}
    skip = api.post_job({"jobName": "skip", "misfirePolicy": "SKIP", **common}).json()["jobId"]
    once = api.post_job({"jobName": "once", "misfirePolicy": "FIRE_ONCE", **common}).json()["jobId"]
    wait_until(lambda: len(api.executions(once)) >= 2, 15, what="a few runs")
    processes.signal("d1", signal.SIGTERM)
    processes.running["d1"].wait(timeout=30)
    # The first trigger of each job no dispatcher claimed; every one from it until d2
    # starts, at least MISSED_MS of them, is missed, whatever the machine's speed.
    missed_from = next_triggers(engine, [skip, once])
    time.sleep(max(0.0, (max(missed_from.values()) + MISSED_MS) / 1000 - time.time()))
    processes.start("d2", "dispatcher", "--id", "d2")
    first = {job: missed_from[job] for job in (skip, once)}
    wait_until(lambda: len(runs_from(engine, skip, first[skip])) >= 3, 20, what="SKIP to go on")
    wait_until(lambda: len(runs_from(engine, once, first[once])) >= 3, 20, what="runs after it")
    # FIRE_ONCE runs the first missed trigger, late, once for all; SKIP skips it; neither
    # has a row for the others (FIRE_ALL would run each).
    for job, status in ((once, "SUCCEEDED"), (skip, "SKIPPED")):
        (trigger, got, dispatched), *after = runs_from(engine, job, first[job])
        assert (trigger, got) == (first[job], status), f"job {job}: the first missed trigger"
        assert all(t > first[job] + MISSED_MS for t, _, _ in after), f"job {job} ran a missed one"
        if status == "SUCCEEDED":
            assert dispatched is not None and dispatched >= trigger + MISSED_MS, "run on time?"
    for job_id in (skip, once):
        assert api.act(job_id, "cancel").status_code == 200
    assert_books(engine, Expectation([skip, once], {"CANCELLED"}, CANCELLED_CRON), timeout=30)


def test_forbid_overlap_skips_triggers_while_the_last_run_goes(
    processes: Processes, engine: Engine
) -> None:
    api = start(processes)
    job_id = api.post_job(
        {
            "jobName": "slow tick",
            "jobHandler": "demo.sleep",
            "params": {"seconds": 2.5},
            "cronExpr": "* * * * * *",
            "overlapPolicy": "FORBID",
        }
    ).json()["jobId"]
    wait_until(
        lambda: len([r for r in api.executions(job_id) if r["status"] == "SKIPPED"]) >= 2,
        20,
        what="skipped overlapping triggers",
    )
    api_job = api.job(job_id)
    assert api_job["policies"]["overlapPolicy"] == "FORBID"
    runs = api.executions(job_id)
    assert all("FORBID" in (r["message"] or "") for r in runs if r["status"] == "SKIPPED")
    queued = [r for r in runs if r["status"] == "QUEUED"]
    assert len(queued) <= 1
    assert api.act(job_id, "cancel").status_code == 200
    assert_books(engine, Expectation([job_id], {"CANCELLED"}, CANCELLED_CRON), timeout=30)


def test_get_previews_the_next_trigger_times_in_the_jobs_zone(
    processes: Processes, engine: Engine
) -> None:
    api = start(processes, dispatcher=False)
    job_id = api.post_job(
        {
            "jobName": "paris 9am",
            "jobHandler": "demo.noop",
            "cronExpr": "0 9 * * *",
            "timezone": "Europe/Paris",
        }
    ).json()["jobId"]
    job = api.job(job_id)
    assert job["nextTriggerTime"] is not None
    import httpx

    response = httpx.get(
        f"{api.base}/openapi/jobs/{job_id}?preview=5",
        headers={"Authorization": f"Bearer {api.api_key}"},
    )
    times = response.json()["nextTriggerTimes"]
    assert len(times) == 5
    assert all(t.endswith(("T08:00:00.000Z", "T07:00:00.000Z")) for t in times)
    # No dispatcher runs here: the job waits for its first trigger, with no execution.
    books = assert_books(engine, Expectation([job_id], {"WAITING"}), timeout=0)
    assert books.executions == 0
