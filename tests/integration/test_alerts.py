"""Alert rules on real stores: the runs they fire on, one alert per window with the
rest counted, streaks, and alerts delivered signed through the notifier."""

from __future__ import annotations

import json
import threading
import time

import pika
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from standardwebhooks import Webhook

from common.alerts.firing import send_summaries
from common.alerts.rules import RuleCache, read_rules
from common.alerts.state_rows import prune_alert_states
from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.db.deliveries import NewDelivery
from common.db.jobs import NewJob, insert_jobs
from common.loadbalance import WorkerChooser
from common.states import ExecutionStatus
from common.topology import declare_core
from services.dispatcher.outcomes.callbacks import callback_message
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender
from tests.integration.alert_helpers import (
    alert_rows,
    app_pk,
    data,
    ended,
    new_rule,
    queued_runs,
    record,
    two_apps,
)
from tests.integration.notifier_helpers import notifier, wait_for_status  # noqa: F401
from tests.integration.receivers import ScriptedReceiver

HOOK = "http://127.0.0.1:9/hook"


def test_a_rule_on_app_a_fires_for_a_failed_runs_and_not_b(
    engine: Engine, redis_client: redis.Redis
) -> None:
    a, b = two_apps(engine)
    rule, _ = new_rule(engine, HOOK, "FAILED,TIMED_OUT", app_id=a)
    runs_a = queued_runs(engine, app_pk(engine, a), runs=1, jobs=20)
    runs_b = queued_runs(engine, app_pk(engine, b), runs=1, jobs=20)
    alerts = record(engine, redis_client, ended(runs_a + runs_b, ExecutionStatus.FAILED))
    assert len(alerts) == 20
    told = {data(d)["jobId"] for d in alerts}
    assert told == {j for j, _ in runs_a}
    assert {data(d)["app"] for d in alerts} == {a}
    assert {d.alert_rule_pk for d in alerts} == {rule.rule_pk}
    assert all(json.loads(d.payload)["type"] == "alert.failed" for d in alerts)
    assert all(d.job_id is None and d.app_pk is None for d in alerts)
    assert len(alert_rows(engine)) == 20


def test_kinds_a_rule_does_not_name_fire_nothing(engine: Engine, redis_client: redis.Redis) -> None:
    a, _b = two_apps(engine)
    new_rule(engine, HOOK, "LOST", app_id=a)
    runs = queued_runs(engine, app_pk(engine, a), runs=1, jobs=5)
    assert record(engine, redis_client, ended(runs, ExecutionStatus.FAILED)) == []
    assert record(engine, redis_client, []) == []
    assert alert_rows(engine) == []


def test_a_job_failing_thousands_of_times_sends_one_alert_then_a_summary(
    engine: Engine, redis_client: redis.Redis
) -> None:
    a, _b = two_apps(engine)
    rule, _ = new_rule(engine, HOOK, "FAILED", every=600)
    runs = queued_runs(engine, app_pk(engine, a), runs=2_000, jobs=1)
    sent = []
    for start in range(0, len(runs), 250):
        sent += record(
            engine, redis_client, ended(runs[start : start + 250], ExecutionStatus.FAILED)
        )
    assert len(sent) == 1
    assert data(sent[0])["suppressed"] == 0
    # Every run recorded, whatever the alerts did.
    with engine.connect() as conn:
        failed = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM executions WHERE status = 'FAILED'"
        ).scalar_one()
    assert failed == 2_000
    now = ClusterClock(redis_client).now_ms()
    with engine.begin() as conn:
        assert send_summaries(conn, read_rules(conn), now) == []  # the window is not over
    with engine.begin() as conn:
        summaries = send_summaries(conn, read_rules(conn), now + 600_000)
    assert len(summaries) == 1
    summary = data(summaries[0])
    assert summary["suppressed"] == 1_999
    assert summary["summary"] is True
    assert summary["jobId"] == runs[0][0]
    assert "1,999 more FAILED" in str(summary["text"])
    with engine.begin() as conn:
        assert send_summaries(conn, read_rules(conn), now + 1_200_000) == []
    assert len(alert_rows(engine)) == 2
    assert rule.every_seconds == 600


def test_the_next_alert_after_the_window_carries_the_count_kept_back(
    engine: Engine, redis_client: redis.Redis
) -> None:
    a, _b = two_apps(engine)
    new_rule(engine, HOOK, "FAILED", every=1)
    runs = queued_runs(engine, app_pk(engine, a), runs=6, jobs=1)
    first = record(engine, redis_client, ended(runs[:5], ExecutionStatus.FAILED))
    assert len(first) == 1
    time.sleep(1.1)
    later = record(engine, redis_client, ended(runs[5:], ExecutionStatus.FAILED))
    assert len(later) == 1
    assert data(later[0])["suppressed"] == 4
    assert "and 4 more since" in str(data(later[0])["text"])


def test_a_streak_fires_on_the_nth_failure_in_a_row_and_a_success_starts_it_again(
    engine: Engine, redis_client: redis.Redis
) -> None:
    a, _b = two_apps(engine)
    new_rule(engine, HOOK, "FAILED,LOST", streak=3, every=1)
    runs = queued_runs(engine, app_pk(engine, a), runs=7, jobs=1)
    assert record(engine, redis_client, ended(runs[0:2], ExecutionStatus.FAILED)) == []
    assert record(engine, redis_client, ended(runs[2:3], ExecutionStatus.SUCCEEDED)) == []
    assert record(engine, redis_client, ended(runs[3:5], ExecutionStatus.LOST)) == []
    third = record(engine, redis_client, ended(runs[5:6], ExecutionStatus.FAILED))
    assert len(third) == 1
    assert data(third[0])["streak"] == 3
    assert "3 failures in a row" in str(data(third[0])["text"])


def test_alerts_reach_the_receiver_through_the_notifier_signed_with_the_rule_secret(
    engine: Engine,
    redis_client: redis.Redis,
    connection: pika.BlockingConnection,
    notifier: None,  # noqa: F811
) -> None:
    receiver = ScriptedReceiver()
    try:
        a, _b = two_apps(engine)
        _rule, secret = new_rule(engine, receiver.url, "FAILED,TIMED_OUT", app_id=a)
        runs = queued_runs(engine, app_pk(engine, a), runs=1, jobs=3)
        alerts = record(engine, redis_client, ended(runs[:2], ExecutionStatus.FAILED))
        alerts += record(engine, redis_client, ended(runs[2:], ExecutionStatus.TIMED_OUT))
        declare_core(connection.channel())
        BatchPublisher(connection.channel()).publish([callback_message(d) for d in alerts])
        for delivery in alerts:
            wait_for_status(engine, delivery.delivery_id, "DELIVERED", 30)
        hook = Webhook(secret)
        types = []
        for arrival in receiver.arrivals:
            body = hook.verify(arrival.body, arrival.headers)
            types.append(body["type"])
            assert body["data"]["text"].startswith("[Kairos] run ")
        assert sorted(types) == ["alert.failed", "alert.failed", "alert.timed_out"]
    finally:
        receiver.close()


def test_retention_prunes_only_the_states_that_owe_nothing(
    engine: Engine, redis_client: redis.Redis
) -> None:
    a, _b = two_apps(engine)
    new_rule(engine, HOOK, "FAILED", every=600)
    runs = queued_runs(engine, app_pk(engine, a), runs=2, jobs=2)
    # Job 1 fails twice (one kept back), job 2 once (nothing owed).
    record(
        engine, redis_client, ended([r for r in runs if r[0] == runs[0][0]], ExecutionStatus.FAILED)
    )
    record(engine, redis_client, ended([runs[1]], ExecutionStatus.FAILED))
    later = ClusterClock(redis_client).now_ms() + 1_000
    with engine.begin() as conn:
        assert prune_alert_states(conn, later, limit=100) == 1
    with engine.connect() as conn:
        left = conn.exec_driver_sql("SELECT subject, suppressed FROM alert_states").all()
    assert [(str(s), int(n)) for s, n in left] == [(str(runs[0][0]), 1)]


def test_a_trigger_its_claim_ends_failed_fires_the_rule(
    engine: Engine, redis_client: redis.Redis
) -> None:
    a, _b = two_apps(engine)
    pk = app_pk(engine, a)
    rule, _ = new_rule(engine, HOOK, "FAILED", app_id=a)
    now = ClusterClock(redis_client).now_ms()
    with engine.begin() as conn:
        (broken,) = insert_jobs(
            conn,
            [NewJob(pk, "broken", "demo.noop", {}, "* * * * * *", now - 10, None, None, None)],
            0,
        )
        # A zone no computation can read (the API refuses one; a row can still hold it).
        conn.execute(
            sa.text("UPDATE jobs SET timezone = 'Nowhere/Atlantis' WHERE id = :j"), {"j": broken}
        )
    rules = RuleCache(engine, refresh_seconds=0)
    clock = ClusterClock(redis_client)
    sender = ClaimSender(WorkerChooser())
    TriggerClaimer(engine, clock, 100, 1_000, sender, alerts=rules).claim({"demo.noop"})
    (alert,) = alert_rows(engine)
    body = json.loads(str(alert.payload))
    assert (body["type"], body["data"]["jobId"]) == ("alert.failed", broken)
    assert "cannot compute this job's schedule" in body["data"]["text"]
    assert alert.alert_rule_pk == rule.rule_pk and alert.status == "PENDING"


def test_dispatchers_recording_one_job_s_failures_at_once_send_one_alert_per_job(
    engine: Engine, redis_client: redis.Redis
) -> None:
    # Every dispatcher runs a results consumer: the states' row locks keep two of them
    # from both sending the first alert of a job, and every failure is counted once.
    a, b = two_apps(engine)
    new_rule(engine, HOOK, "FAILED", every=600)
    runs = queued_runs(engine, app_pk(engine, a), runs=150, jobs=3)
    runs += queued_runs(engine, app_pk(engine, b), runs=150, jobs=1)
    jobs = sorted({j for j, _ in runs})
    # Each job's first failure sent its alert long ago: the window is over for all.
    first = [next(r for r in runs if r[0] == j) for j in jobs]
    assert len(record(engine, redis_client, ended(first, ExecutionStatus.FAILED))) == 4
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alert_states SET last_sent_at = last_sent_at - 600000")
    results = ended([r for r in runs if r not in first], ExecutionStatus.FAILED)
    chunks = [results[n::4] for n in range(4)]
    sent: list[list[NewDelivery]] = [[] for _ in chunks]

    def consume(n: int) -> None:
        for start in range(0, len(chunks[n]), 50):
            sent[n] += record(engine, redis_client, chunks[n][start : start + 50])

    threads = [threading.Thread(target=consume, args=(n,)) for n in range(len(chunks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    alerts = [d for batch in sent for d in batch]
    assert sorted(int(str(data(d)["jobId"])) for d in alerts) == jobs
    with engine.connect() as conn:
        kept_back = conn.exec_driver_sql("SELECT SUM(suppressed) FROM alert_states").scalar_one()
        failed = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM executions WHERE status = 'FAILED'"
        ).scalar_one()
    assert failed == len(runs) == 600
    assert len(first) + len(alerts) + int(kept_back) == len(runs)
