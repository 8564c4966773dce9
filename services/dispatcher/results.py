"""Recording execution outcomes: execution row, job state, callback delivery, in one commit."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection, Engine

from common.clock import ClusterClock
from common.cron import next_trigger_ms
from common.db.deliveries import NewDelivery, insert_deliveries
from common.db.executions import lock_unfinished, record_outcomes
from common.db.jobs import finish_trigger
from common.messages import ExecutionResult
from common.states import JobStatus
from services.dispatcher.callbacks import callback_payload, new_delivery

log = logging.getLogger(__name__)


def record_results(
    engine: Engine, clock: ClusterClock, results: Sequence[ExecutionResult]
) -> list[NewDelivery]:
    """Record every result not recorded before; return the callback deliveries it created.

    A result seen twice (a redelivery, or a copy another dispatcher handles at the same
    time) finds its execution already final, or locked and then final, and is skipped.
    """
    if not results:
        return []
    with engine.begin() as conn:
        rows = {r.execution_id: r for r in lock_unfinished(conn, [x.execution_id for x in results])}
        fresh = _first_of_each(results, rows)
        now = clock.now_ms()
        record_outcomes(conn, [_outcome(r) for r in fresh])
        for result in fresh:
            _advance_job(conn, rows[result.execution_id], result, now)
        created = [_delivery(r, rows[r.execution_id]) for r in fresh]
        wanted = [d for d in created if d is not None]
        insert_deliveries(conn, wanted, now)
    for result in fresh:
        log.info(
            "execution %s on %s",
            result.status.lower(),
            result.worker_id,
            extra={"job_id": result.job_id, "execution_id": result.execution_id},
        )
    return wanted


def _first_of_each(
    results: Sequence[ExecutionResult], rows: dict[str, Any]
) -> list[ExecutionResult]:
    seen: set[str] = set()
    fresh = []
    for result in results:
        if result.execution_id in rows and result.execution_id not in seen:
            seen.add(result.execution_id)
            fresh.append(result)
    return fresh


def _outcome(result: ExecutionResult) -> dict[str, Any]:
    return {
        "execution_id": result.execution_id,
        "status": result.status,
        "worker_id": result.worker_id,
        "message": result.message,
        "result": result.result,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
    }


def _advance_job(conn: Connection, row: Any, result: ExecutionResult, now: int) -> None:
    if row.cron_expr:
        after = max(int(row.trigger_time), now)
        finish_trigger(
            conn, row.job_id, JobStatus.WAITING, next_trigger_ms(row.cron_expr, after), now
        )
        return
    final = JobStatus.SUCCEEDED if result.status == "SUCCEEDED" else JobStatus.FAILED
    finish_trigger(conn, row.job_id, final, None, now)


def _delivery(result: ExecutionResult, row: Any) -> NewDelivery | None:
    if not row.callback_url:
        return None
    payload = callback_payload(result, int(row.attempt), int(row.trigger_time))
    return new_delivery(result, row, str(row.callback_url), payload)
