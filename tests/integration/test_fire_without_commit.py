"""A fire that published its runs and never committed: the dispatcher died between the
two (SIGKILL). Its transaction goes back whole, so nothing it wrote on the rows is left,
yet the workers run what it sent and the results path records them. What the fire had
judged and written on a child's run (the parent runs it waited for) must still be on
the recorded run, for every app's children, beside runs of jobs without parents."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage
from common.clock import ClusterClock
from common.db.executions import NewExecution, insert_executions
from common.db.job_dependencies import After, insert_edges
from common.db.jobs import NewJob, insert_jobs
from common.dependencies import DependOn
from common.messages import ExecutionResult
from common.states import ExecutionStatus
from services.dispatcher.outcomes.recording import record_results
from tests.integration.helpers import make_app
from tests.integration.test_firing import firer, scheduled, statuses


class DiedAfterPublishError(BaseException):
    """The dispatcher's end, between its publish and its commit."""


class DyingPublisher:
    """Publishes for real, then the process 'dies' before the fire commits."""

    def __init__(self, inner: BatchPublisher) -> None:
        self._inner = inner
        self.sent: list[str] = []

    def publish(self, messages: Sequence[OutgoingMessage]) -> set[str]:
        self._inner.publish(messages)
        self.sent += [m.message_id for m in messages]
        raise DiedAfterPublishError(f"{len(messages)} published, then SIGKILL")


def _jobs(
    engine: Engine, app_pk: int, names: list[str], parents: list[int] | None = None
) -> list[int]:
    after = tuple(After(p, DependOn.FINISHED) for p in parents or [])
    new = [
        NewJob(app_pk, n, "demo.noop", {}, None, 0, None, None, None, after=after) for n in names
    ]
    with engine.begin() as conn:
        ids = insert_jobs(conn, new, 0)
        insert_edges(conn, [(i, a) for i in ids for a in after])
    return ids


def _ended(engine: Engine, job_id: int, status: ExecutionStatus) -> str:
    execution_id = f"p-{job_id}"
    with engine.begin() as conn:
        insert_executions(conn, [NewExecution(execution_id, job_id, 1, 0, 0).queued_on("w1")], 0)
        conn.execute(
            sa.text("UPDATE executions SET status = :s, ended_at = 10 WHERE execution_id = :e"),
            {"s": status.value, "e": execution_id},
        )
    return execution_id


def _waited_for(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT execution_id, waited_for FROM executions")).all()
    return {str(r[0]): None if r[1] is None else json.loads(r[1]) for r in rows}


def _result(execution_id: str, job_id: int) -> ExecutionResult:
    return ExecutionResult(
        execution_id=execution_id,
        job_id=job_id,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=1_100,
        ended_at=1_200,
    )


def test_a_childs_run_sent_by_a_fire_that_never_committed_records_what_it_waited_for(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    now = ClusterClock(redis_client).now_ms()
    runs: dict[str, int] = {}
    expected: dict[str, Any] = {}
    for app_pk, name in ((1, "first"), (2, "second")):
        make_app(engine, name)
        good, bad = _jobs(engine, app_pk, [f"{name}-good", f"{name}-bad"])
        parent_runs = {good: _ended(engine, good, ExecutionStatus.SUCCEEDED)}
        parent_runs[bad] = _ended(engine, bad, ExecutionStatus.FAILED)
        (child,) = _jobs(engine, app_pk, [f"{name}-child"], [good, bad])
        (plain,) = _jobs(engine, app_pk, [f"{name}-plain"])
        for job_id in (child, plain):
            runs[f"e-{job_id}"] = job_id
            scheduled(engine, job_id, f"e-{job_id}", now - 10)
        expected[f"e-{child}"] = [
            {"jobId": good, "executionId": parent_runs[good], "status": "SUCCEEDED"},
            {"jobId": bad, "executionId": parent_runs[bad], "status": "FAILED"},
        ]
        expected[f"e-{plain}"] = None
    fire = firer(engine, redis_client, connection)
    dying = DyingPublisher(cast(BatchPublisher, fire._publisher))
    fire._publisher = cast(BatchPublisher, dying)
    fire.load()
    with pytest.raises(DiedAfterPublishError):
        fire.fire_due()
    assert len(dying.sent) == 1, "one pack of four runs went to w1's queue"
    scheduled_now = {e: s for e, s in statuses(engine).items() if e in runs}
    assert set(scheduled_now.values()) == {"SCHEDULED"}, "the fire went back whole"

    # w1 runs what reached its queue; the results path records it.
    record_results(engine, ClusterClock(redis_client), [_result(e, j) for e, j in runs.items()])

    assert {e: statuses(engine)[e] for e in runs} == dict.fromkeys(runs, "SUCCEEDED")
    assert {e: _waited_for(engine)[e] for e in runs} == expected
