"""Alerts with real processes: an every-second cron that keeps failing sends a few
alerts and a summary that, together, account for every failure; signed with the
rule's secret and sent by the notifier."""

from __future__ import annotations

import json
import time

from sqlalchemy.engine import Engine
from standardwebhooks import Webhook

from tests.e2e.harness import CallbackReceiver, Processes, connect_api, free_port, wait_until


def failed_runs(engine: Engine, job_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT COUNT(*) FROM executions WHERE job_id = %s AND status = 'FAILED'",
                (job_id,),
            ).scalar_one()
        )


def test_a_failing_every_second_cron_sends_alerts_that_count_every_failure(
    processes: Processes, engine: Engine, receiver: CallbackReceiver
) -> None:
    processes.start("w1", "worker", "--id", "w1")
    processes.start("d1", "dispatcher", "--id", "d1")
    processes.start("notifier", "notifier")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    api = connect_api(processes, port)
    rule = json.loads(
        processes.run(
            "alerts", "add", "--webhook", receiver.url, "--on", "FAILED,LOST,TIMED_OUT",
            "--every", "3", "-o", "json",
        )
    )  # fmt: skip
    time.sleep(3.5)  # the dispatcher's rule cache reads the rule within 3 s
    job_id = api.post_job(
        {"jobName": "always-failing", "jobHandler": "demo.fail", "cronExpr": "* * * * * *"}
    ).json()["jobId"]
    wait_until(lambda: failed_runs(engine, job_id) >= 10, 60, what="ten failed runs")
    assert api.act(job_id, "pause").status_code == 200
    time.sleep(2)  # a run already sent ends
    failures = failed_runs(engine, job_id)

    def counted() -> int:
        # By webhook-id: a delivery POSTed twice (at least once) counts once.
        alerts = {a.headers.get("webhook-id"): a.body for a in receiver.received}
        told = 0
        for body in alerts.values():
            data = json.loads(body)["data"]
            told += data["suppressed"] + (0 if data.get("summary") else 1)
        return told

    # The last events kept back come in a summary once their window is over.
    wait_until(lambda: counted() == failures, 30, what="alerts counting every failure")
    assert len(receiver.received) < failures
    hook = Webhook(rule["signingSecret"])
    for arrival in receiver.received:
        headers = {k.lower(): v for k, v in arrival.headers.items()}
        body = hook.verify(arrival.body, headers)
        assert body["type"] == "alert.failed"
        assert body["data"]["jobId"] == job_id
