"""Recording execution outcomes: execution row, job state, callback delivery, in one commit."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection, Engine

from common.clock import ClusterClock
from common.cron import next_trigger_ms
from common.db.deliveries import NewDelivery, insert_deliveries
from common.db.executions import lock_unfinished, record_outcomes
from common.db.jobs import finish_trigger, trigger_settings
from common.db.retry import retry_lock_conflicts
from common.messages import ExecutionResult
from common.states import JobStatus
from services.dispatcher.callbacks import callback_payload, new_delivery

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Finished:
    result: ExecutionResult
    execution: Any
    job: Any


@retry_lock_conflicts
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
        finished = _lock_and_match(conn, results)
        now = clock.now_ms()
        record_outcomes(conn, [_outcome(f) for f in finished])
        for item in sorted(finished, key=lambda f: int(f.job.id)):
            _advance_job(conn, item, now)
        wanted = [d for d in (_delivery(f) for f in finished) if d is not None]
        insert_deliveries(conn, wanted, now)
    for item in finished:
        log.info(
            "execution %s on %s",
            item.result.status.lower(),
            item.result.worker_id,
            extra={"job_id": item.result.job_id, "execution_id": item.result.execution_id},
        )
    return wanted


def _lock_and_match(conn: Connection, results: Sequence[ExecutionResult]) -> list[_Finished]:
    rows = {r.execution_id: r for r in lock_unfinished(conn, [x.execution_id for x in results])}
    jobs = trigger_settings(conn, [int(r.job_id) for r in rows.values()])
    finished: list[_Finished] = []
    for result in results:
        row = rows.pop(result.execution_id, None)
        if row is not None:
            finished.append(_Finished(result, row, jobs[int(row.job_id)]))
    return finished


def _outcome(item: _Finished) -> dict[str, Any]:
    result = item.result
    return {
        "id": int(item.execution.id),
        "status": result.status,
        "worker_id": result.worker_id,
        "message": result.message,
        "result": result.result,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
    }


def _advance_job(conn: Connection, item: _Finished, now: int) -> None:
    if item.job.cron_expr:
        after = max(int(item.execution.trigger_time), now)
        upcoming = next_trigger_ms(item.job.cron_expr, after)
        finish_trigger(conn, item.job.id, JobStatus.WAITING, upcoming, now)
        return
    final = JobStatus.SUCCEEDED if item.result.status == "SUCCEEDED" else JobStatus.FAILED
    finish_trigger(conn, item.job.id, final, None, now)


def _delivery(item: _Finished) -> NewDelivery | None:
    if not item.job.callback_url:
        return None
    payload = callback_payload(
        item.result, int(item.execution.attempt), int(item.execution.trigger_time)
    )
    return new_delivery(item.result, item.job.app_id, str(item.job.callback_url), payload)
