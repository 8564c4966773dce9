"""What an operator can do with an execution stuck on its way: see it, fail it, requeue it.

The CLI uses these today and the console will; both reach the stores directly. Failing
goes through the one results path as a stand-in result (as the reconciler's and the
dead-worker sweep's do), so the job's retry policy, its state and its callback follow
exactly as they would for a worker's report. Requeueing hands the execution, under the
same id, back to the firer, which sends it to a live worker.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from sqlalchemy.engine import Engine

from common.broker import Publisher
from common.clock import ClusterClock
from common.db.audit import AuditEntry, record_alone, record_audit
from common.db.stuck_executions import (
    StuckExecution,
    find_unfinished,
    queued_before,
    requeue,
    scheduled_before,
)
from common.documents import JsonObject
from common.errors import ExecutionNotStuckError
from common.keys import RedisKeys
from common.operator_roles import EVERY_APP, AppScope
from common.result_messages import publish_results, stand_in_results
from common.started_marks import OPERATOR, RedisStartedMarks, RunState
from common.states import ExecutionStatus
from common.timefmt import iso_ms

LIST_LIMIT = 1_000


@dataclass(frozen=True)
class StuckView:
    """A stuck execution and what its started key says."""

    execution: StuckExecution
    run: RunState
    run_owner: str | None

    def as_dict(self, now_ms: int) -> dict[str, object]:
        """The fields ``kairos executions stuck --output json`` prints."""
        e = self.execution
        return {
            "executionId": e.execution_id,
            "jobId": e.job_id,
            "attempt": e.attempt,
            "status": e.status.value,
            "workerId": e.worker_id,
            "handler": e.handler,
            "since": iso_ms(e.since_ms),
            "ageSeconds": round((now_ms - e.since_ms) / 1000, 1),
            "run": self.run.value,
            "runOwner": self.run_owner,
        }


@dataclass(frozen=True)
class ExecutionStores:
    """The stores an operation on executions reaches."""

    engine: Engine
    redis: redis.Redis
    keys: RedisKeys
    clock: ClusterClock
    fence_ttl_seconds: int

    def started_marks(self) -> RedisStartedMarks:
        """The started marks of these stores' namespace."""
        return RedisStartedMarks(self.redis, self.keys)


def list_stuck(
    stores: ExecutionStores, older_than_ms: int, scope: AppScope = EVERY_APP
) -> list[StuckView]:
    """QUEUED executions dispatched, and SCHEDULED ones due, more than ``older_than_ms``
    ago, longest first within each state, of the jobs of the apps in ``scope``."""
    cutoff = stores.clock.now_ms() - older_than_ms
    pks = scope.app_pks
    with stores.engine.connect() as conn:
        rows = queued_before(conn, cutoff, LIST_LIMIT, app_pks=pks) + scheduled_before(
            conn, cutoff, LIST_LIMIT, pks
        )
    return _with_runs(stores, rows)


def _with_runs(stores: ExecutionStores, rows: list[StuckExecution]) -> list[StuckView]:
    if not rows:
        return []
    marks = stores.started_marks().read_runs([r.execution_id for r in rows])
    return [StuckView(row, mark.state, mark.owner) for row, mark in zip(rows, marks, strict=True)]


def find_stuck(
    stores: ExecutionStores, execution_id: str, scope: AppScope = EVERY_APP
) -> StuckView:
    """One unfinished execution of a job of an app in ``scope``, with its run state;
    raises ``ExecutionNotStuckError`` (for another app's as for one that does not
    exist)."""
    with stores.engine.connect() as conn:
        row = find_unfinished(conn, execution_id)
    if row is None or not scope.includes(row.app_pk):
        raise ExecutionNotStuckError(execution_id, "it does not exist or has already ended")
    return _with_runs(stores, [row])[0]


def fail_execution(
    stores: ExecutionStores,
    publisher: Publisher,
    execution_id: str,
    reason: str,
    scope: AppScope = EVERY_APP,
    *,
    actor: str,
) -> StuckView:
    """Record an unfinished execution of an app in ``scope`` FAILED with ``reason`` (the
    job's retry policy applies). A copy of it that turns up later is not run. Returns
    what it was. ``actor`` is whom the audit trail names."""
    view = find_stuck(stores, execution_id, scope)
    entry = _audit_entry(actor, "execution.fail", view, {"status": "FAILED", "reason": reason})
    record_alone(stores.engine, entry, stores.clock.now_ms())
    # Taken when free, so that no worker starts it from now on; a run already going
    # keeps going, and its own result, arriving later, is ignored.
    stores.started_marks().fence([execution_id], OPERATOR, stores.fence_ttl_seconds)
    now = stores.clock.now_ms()
    message = f"failed by an operator: {reason}"
    results = stand_in_results([view.execution], ExecutionStatus.FAILED, message, now)
    publish_results(publisher, OPERATOR, results)
    return view


def _audit_entry(actor: str, action: str, view: StuckView, after: JsonObject) -> AuditEntry:
    e = view.execution
    before = {"status": e.status.value, "workerId": e.worker_id, "run": view.run.value}
    return AuditEntry(actor, action, "execution", e.execution_id, e.app_pk, before, after)


def requeue_execution(
    stores: ExecutionStores, execution_id: str, scope: AppScope = EVERY_APP, *, actor: str
) -> StuckView:
    """Hand an execution (of an app in ``scope``) that never started back to the firer,
    to be sent at once.

    Refused (``ExecutionNotStuckError``) when a worker started it: a run that may have
    had effects is failed, not run again under the same id.
    """
    view = find_stuck(stores, execution_id, scope)
    if view.run is not RunState.NEVER_STARTED:
        owner = f" ({view.run_owner})" if view.run_owner else ""
        raise ExecutionNotStuckError(
            execution_id,
            f"its run is {view.run.value.replace('_', ' ')}{owner}; "
            "only an execution that never started can be requeued (fail it instead)",
        )
    now = stores.clock.now_ms()
    with stores.engine.begin() as conn:
        changed = requeue(conn, execution_id, now)
        if changed:
            entry = _audit_entry(actor, "execution.requeue", view, {"status": "SCHEDULED"})
            record_audit(conn, [entry], now)
    if not changed:
        raise ExecutionNotStuckError(execution_id, "it ended while being requeued")
    return view
