"""The console in a real headless browser against a real stack: every page shows live
data, every action works, at desktop and phone widths (screenshots under the test's tmp
dir, path printed)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import wall_ms
from common.db.schema import callback_deliveries, executions
from tests.books import Expectation, assert_books
from tests.e2e.browser import Console
from tests.e2e.harness import Api, CallbackReceiver, Processes, connect_api, free_port, wait_until

OpenTab = Callable[[str], Console]


def start_stack(processes: Processes) -> tuple[Api, str]:
    """Dispatcher (reconciler off), workers w1 and w2, notifier, API; an operator."""
    processes.start("d", "dispatcher", KAIROS_RECONCILE_AFTER_SECONDS="0")
    processes.start("w1", "worker", "--id", "w1", "--capacity", "4")
    processes.start("w2", "worker", "--id", "w2", "--capacity", "2")
    processes.start("n", "notifier")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    api = connect_api(processes, port)
    token = json.loads(processes.run("operator", "create", "alice", "--role", "admin"))["token"]
    return api, token


def executions_of(engine: Engine, job_id: int) -> list[dict[str, object]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(executions).where(executions.c.job_id == job_id))
        return [dict(r._mapping) for r in rows]


@pytest.mark.timeout(240)
def test_overview_jobs_and_a_job_show_live_data_and_job_actions_work(
    processes: Processes, engine: Engine, console_tab: OpenTab
) -> None:
    api, token = start_stack(processes)
    cron = api.post_job(
        {"jobName": "every-2s", "jobHandler": "demo.noop", "cronExpr": "*/2 * * * * *"}
    )
    cron_id = int(cron.json()["jobId"])
    failing = api.post_job(
        {"jobName": "breaks", "jobHandler": "demo.fail", "params": {"message": "disk full"}}
    )
    failing_id = int(failing.json()["jobId"])
    api.wait_status(failing_id, {"FAILED"})
    console = console_tab(api.base)
    console.sign_in(token)

    console.until(
        "/console/",
        lambda p: int(p.inner_text("#finished")) >= 3 and int(p.inner_text("#failed")) >= 1,
        "the overview to count the runs",
    )
    page = console.page
    assert page.inner_text("#live-workers").startswith("2")
    assert page.inner_text("#lag") != "-"
    # The queues' table by its section: the apps' table comes first whenever an app has
    # a run going (the every-2s cron, now and then).
    assert "kairos.worker.w1" in page.inner_text("#queues table.list")
    assert page.locator("svg.chart rect.good").count() > 0
    console.shoot("overview")

    console.go("/console/jobs")
    assert "every-2s" in page.inner_text("table.jobs") and "breaks" in page.inner_text("table.jobs")
    console.shoot("jobs")
    console.go("/console/jobs?handler=demo.fail")
    rows = page.locator("table.jobs tbody tr")
    assert rows.count() == 1 and "FAILED" in rows.first.inner_text()

    console.go(f"/console/jobs/{failing_id}")
    assert "disk full" in page.inner_text("ol.timeline")
    console.go(f"/console/jobs/{cron_id}")
    assert page.inner_text("#schedule-words").startswith("every 2 seconds (UTC)")
    assert page.locator("ol.next-triggers li").count() == 5
    runs = page.inner_text("ol.timeline")
    assert "SUCCEEDED" in runs and re.search(r"worker w[12]", runs)
    console.shoot("job")

    act = f"form[action='/console/jobs/{cron_id}/%s']"
    assert console.submit(act % "pause") == f"Job {cron_id} paused."
    assert api.job(cron_id)["status"] == "PAUSED"
    assert console.submit(act % "resume") == f"Job {cron_id} resumed."
    assert api.job(cron_id)["status"] in {"WAITING", "RUNNING"}
    triggered = console.submit(act % "trigger")
    execution_id = re.search(r"execution ([0-9a-f-]{36})", triggered)
    assert execution_id, triggered
    wait_until(
        lambda: any(
            e["execution_id"] == execution_id.group(1)
            and e["status"] == "SUCCEEDED"
            and e["manual"]
            for e in executions_of(engine, cron_id)
        ),
        30,
        what="the manual run to succeed",
    )
    assert console.submit(act % "cancel") == f"Job {cron_id} cancelled."
    assert api.job(cron_id)["status"] == "CANCELLED"
    assert page.locator(act % "pause").count() == 0, "a cancelled job offers no pause"
    assert_books(
        engine,
        Expectation(
            [cron_id],
            job_statuses={"CANCELLED"},
            execution_statuses={"SUCCEEDED", "SKIPPED", "CANCELLED"},
        ),
        Expectation([failing_id], job_statuses={"FAILED"}, execution_statuses={"FAILED"}),
        timeout=30,
    )


def lost_dispatch(api: Api, engine: Engine, name: str) -> str:
    """A job whose execution sits QUEUED on a worker that never existed since 10 minutes
    ago, as a lost dispatch message leaves it (the reconciler is off); its id."""
    job_id = int(
        api.post_job(
            {"jobName": name, "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}
        ).json()["jobId"]
    )
    execution_id = str(uuid.uuid4())
    ago = wall_ms() - 600_000
    with engine.begin() as conn:
        conn.execute(
            executions.insert().values(
                execution_id=execution_id,
                job_id=job_id,
                attempt=1,
                trigger_time=ago,
                worker_id="w-gone",
                status="QUEUED",
                created_at=ago,
                dispatched_at=ago,
                scheduled_at=ago,
            )
        )
    return execution_id


def execution(engine: Engine, execution_id: str) -> dict[str, object]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(executions).where(executions.c.execution_id == execution_id)
        ).one()
    return dict(row._mapping)


@pytest.mark.timeout(240)
def test_workers_drain_and_stuck_executions_fail_and_requeue(
    processes: Processes, engine: Engine, console_tab: OpenTab
) -> None:
    api, token = start_stack(processes)
    to_requeue = lost_dispatch(api, engine, "requeue-me")
    to_fail = lost_dispatch(api, engine, "fail-me")
    console = console_tab(api.base)
    console.sign_in(token)
    page = console.page

    # The management API counts consumers a few seconds late: wait for w2's to show.
    console.until(
        "/console/workers",
        lambda p: (
            p.locator("#worker-w1").count() == 1
            and "1 consumer"
            in (p.inner_text("#worker-w2") if p.locator("#worker-w2").count() else "")
        ),
        "both workers to be listed, w2 with its consumer",
    )
    w2 = page.inner_text("#worker-w2")
    assert "ACTIVE" in w2 and "/ 2" in w2 and "1 consumer" in w2
    console.shoot("workers")
    # A standing drain: w2 takes no new work and stays up, until undrained.
    assert "stays up until undrained" in console.submit("form[action='/console/workers/w2/drain']")
    console.until(
        "/console/workers",
        lambda p: (
            "DRAINING" in p.inner_text("#worker-w2") and "drained" in p.inner_text("#worker-w2")
        ),
        "w2 to drain",
    )
    console.shoot("workers-drained")
    assert "drained by operator alice" in processes.log("w2")
    assert processes.running["w2"].poll() is None
    assert "takes work again" in console.submit("form[action='/console/workers/w2/undrain']")
    console.until(
        "/console/workers",
        lambda p: (
            "ACTIVE" in p.inner_text("#worker-w2")
            and p.locator("form[action='/console/workers/w2/stop']").count() == 1
        ),
        "w2 to take work again",
    )
    assert "undrained: taking work again" in processes.log("w2")
    assert "drains at its next heartbeat" in console.submit(
        "form[action='/console/workers/w2/stop']"
    )
    console.until(
        "/console/workers", lambda p: "STOPPED" in p.inner_text("#worker-w2"), "w2 to stop"
    )
    assert processes.running["w2"].wait(timeout=30) == 0
    assert "drain requested by operator alice" in processes.log("w2")

    console.go("/console/executions/stuck")
    table = page.inner_text("table.list")
    assert to_requeue in table and to_fail in table and "never started" in table
    console.shoot("stuck")
    requeued = console.submit(f"form[action='/console/executions/{to_requeue}/requeue']")
    assert requeued.startswith(f"Execution {to_requeue} requeued")
    page.fill(
        f"form[action='/console/executions/{to_fail}/fail'] input[name=reason]", "lost in transit"
    )
    failed = console.submit(f"form[action='/console/executions/{to_fail}/fail']")
    assert to_fail in failed and "FAILED" in failed
    console.until(
        "/console/executions/stuck",
        lambda p: p.locator("#none-stuck").count() == 1,
        "nothing stuck",
    )
    wait_until(
        lambda: execution(engine, to_requeue)["status"] == "SUCCEEDED", 30, what="the requeued run"
    )
    assert execution(engine, to_requeue)["worker_id"] == "w1", "w2 drained: only w1 is live"
    gone = execution(engine, to_fail)
    assert gone["status"] == "FAILED" and "lost in transit (alice)" in str(gone["message"])


def deliveries(engine: Engine) -> dict[int, dict[str, object]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(callback_deliveries))
        return {int(r.job_id): dict(r._mapping) for r in rows}


@pytest.mark.timeout(240)
def test_dead_callbacks_are_listed_with_their_error_and_replayed_one_then_all(
    processes: Processes, engine: Engine, console_tab: OpenTab
) -> None:
    receiver = CallbackReceiver(statuses=[500] * 6)
    try:
        api, token = start_stack(processes)
        body = {"jobHandler": "demo.noop", "callbackUrl": receiver.url}
        first, second = (
            int(api.post_job({**body, "jobName": n}).json()["jobId"]) for n in ("cb-1", "cb-2")
        )
        wait_until(
            lambda: [d["status"] for d in deliveries(engine).values()] == ["DEAD", "DEAD"],
            40,
            what="both callbacks to be parked dead",
        )
        console = console_tab(api.base)
        console.sign_in(token)
        page = console.page
        console.go("/console/callbacks/dead")
        listed = page.inner_text("table.list")
        assert listed.count("500") >= 2 and receiver.url in listed
        console.shoot("dead-callbacks")
        one = deliveries(engine)[first]["delivery_id"]
        assert console.submit(f"form[action='/console/callbacks/dead/{one}/replay']") == (
            "Replayed 1 dead callbacks."
        )
        wait_until(
            lambda: deliveries(engine)[first]["status"] == "DELIVERED", 30, what="one replay"
        )
        assert deliveries(engine)[second]["status"] == "DEAD"
        assert console.submit("form[action='/console/callbacks/dead/replay']") == (
            "Replayed 1 dead callbacks."
        )
        wait_until(
            lambda: deliveries(engine)[second]["status"] == "DELIVERED", 30, what="replay all"
        )
        console.go("/console/callbacks/dead")
        assert page.locator("#none-dead").count() == 1
        console.go(f"/console/jobs/{first}")
        callbacks = page.locator("table.list").last.inner_text()
        assert "DELIVERED" in callbacks and "4" in callbacks
        console.shoot("job-callbacks")
        assert_books(
            engine, Expectation([first, second], execution_statuses={"SUCCEEDED"}), timeout=30
        )
    finally:
        receiver.close()
