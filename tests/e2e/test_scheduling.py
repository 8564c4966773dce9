"""Scheduling semantics against running processes: retries, timeouts, misfires, overlap."""

from __future__ import annotations

import signal
import time

from sqlalchemy.engine import Engine

from common.timefmt import iso_ms, parse_instant
from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until


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
    stopped_at = int(time.time() * 1000)
    time.sleep(4)
    processes.start("d2", "dispatcher", "--id", "d2")
    wait_until(
        lambda: [r for r in api.executions(skip) if r["status"] == "SKIPPED"],
        20,
        what="a SKIPPED trigger",
    )
    wait_until(lambda: len(api.executions(once)) >= 6, 20, what="runs after the restart")
    resumed = [r for r in api.executions(once) if parse_instant(r["triggerTime"]) > stopped_at]
    late = [
        r
        for r in resumed
        if r["dispatchedAt"]
        and parse_instant(r["dispatchedAt"]) - parse_instant(r["triggerTime"]) > 2_000
    ]
    assert len(late) == 1, "FIRE_ONCE runs one missed trigger, not each of them"
    skipped_late = [
        r
        for r in api.executions(skip)
        if r["dispatchedAt"]
        and parse_instant(r["dispatchedAt"]) - parse_instant(r["triggerTime"]) > 2_000
    ]
    assert not skipped_late, "SKIP runs none of the triggers it missed"
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
