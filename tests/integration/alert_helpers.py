"""Builders for alert tests: apps with failing runs, results recorded as the results
consumer records them, and the alert deliveries read back."""

from __future__ import annotations

import json
from collections.abc import Sequence

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.alerts.kinds import parse_kinds
from common.alerts.rules import AlertRule, NewAlertRule, RuleCache, add_rule
from common.clock import ClusterClock
from common.db.deliveries import NewDelivery
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_jobs
from common.messages import ExecutionResult
from common.states import ExecutionStatus, ReportedStatus
from services.dispatcher.outcomes.recording import record_each_alone_if_need_be
from tests.integration.helpers import make_app


def app_pk(engine: Engine, app_id: str) -> int:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT id FROM apps WHERE app_id = :a"), {"a": app_id}
        ).scalar_one()
    return int(found)


def two_apps(engine: Engine) -> tuple[str, str]:
    """Apps A and B; their public ids."""
    return make_app(engine, "a").app_id, make_app(engine, "b").app_id


def new_rule(
    engine: Engine,
    url: str,
    on: str,
    app_id: str | None = None,
    streak: int = 1,
    every: int = 600,
) -> tuple[AlertRule, str]:
    """A rule as ``kairos alerts add`` makes it; with its secret."""
    with engine.begin() as conn:
        return add_rule(conn, NewAlertRule(url, parse_kinds(on), app_id, streak, every), "test", 0)


def queued_runs(engine: Engine, app: int, runs: int, jobs: int = 1) -> list[tuple[int, str]]:
    """``jobs`` jobs of the app with ``runs`` QUEUED runs each on w1, oldest first, as
    (job id, execution id)."""
    new = [
        NewJob(app, f"j{n}", "demo.noop", {}, None, 1_000, None, None, None) for n in range(jobs)
    ]
    with engine.begin() as conn:
        job_ids = insert_jobs(conn, new, 0)
        made = [(j, f"e-{j}-{n}") for n in range(runs) for j in job_ids]
        rows = [
            NewExecution(e, j, 1, 1_000 + n, 1_000 + n).queued_on("w1")
            for n, (j, e) in enumerate(made)
        ]
        insert_executions(conn, rows, 1_000)
    return made


def ended(runs: Sequence[tuple[int, str]], status: ReportedStatus) -> list[ExecutionResult]:
    """The results of ``runs`` ending ``status`` on w1."""
    return [
        ExecutionResult(
            execution_id=e,
            job_id=j,
            worker_id="w1",
            status=status,
            message="boom" if status is not ExecutionStatus.SUCCEEDED else None,
            started_at=1_100,
            ended_at=1_200,
        )
        for j, e in runs
    ]


def record(
    engine: Engine, redis_client: redis.Redis, results: Sequence[ExecutionResult]
) -> list[NewDelivery]:
    """Record ``results`` as the results consumer does (rules read fresh); the alert
    deliveries it made."""
    rules = RuleCache(engine, refresh_seconds=0)
    recorded = record_each_alone_if_need_be(engine, ClusterClock(redis_client), results, rules)
    return [d for d in recorded.deliveries if d.alert_rule_pk is not None]


def data(delivery: NewDelivery) -> dict[str, object]:
    body = json.loads(delivery.payload)
    assert body["type"].startswith("alert.")
    return dict(body["data"])


def alert_rows(engine: Engine) -> list[sa.Row[tuple[object, ...]]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT * FROM callback_deliveries WHERE alert_rule_pk IS NOT NULL ORDER BY id"
                )
            ).all()
        )
