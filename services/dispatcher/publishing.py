"""Turning executions into dispatch messages and recording which ones landed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage
from common.clock import ClusterClock
from common.db.executions import mark_queued
from common.db.retry import retry_lock_conflicts
from common.messages import DispatchMessage
from common.topology import DISPATCH_EXCHANGE


@dataclass(frozen=True)
class Assignment:
    """One execution bound for one worker."""

    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    handler: str
    params_json: str
    worker_id: str


def dispatch_message(assignment: Assignment, now_ms: int) -> OutgoingMessage:
    """The persistent message that carries an execution to its worker's queue."""
    message = DispatchMessage(
        execution_id=assignment.execution_id,
        job_id=assignment.job_id,
        attempt=assignment.attempt,
        trigger_time=assignment.trigger_time,
        handler=assignment.handler,
        params=json.loads(assignment.params_json),
        dispatched_at=now_ms,
    )
    return OutgoingMessage(
        exchange=DISPATCH_EXCHANGE,
        routing_key=assignment.worker_id,
        body=message.model_dump_json().encode(),
        message_id=assignment.execution_id,
    )


def publish_assignments(
    engine: Engine,
    publisher: BatchPublisher,
    clock: ClusterClock,
    assignments: Sequence[Assignment],
) -> set[str]:
    """Publish, then mark QUEUED what the broker took; return the ids it could not route.

    What is not marked stays PENDING and the recovery sweep publishes it again later,
    to whichever worker is live then.
    """
    if not assignments:
        return set()
    now = clock.now_ms()
    returned = publisher.publish([dispatch_message(a, now) for a in assignments])
    landed = [a.execution_id for a in assignments if a.execution_id not in returned]
    record_queued(engine, landed, now)
    return returned


@retry_lock_conflicts
def record_queued(engine: Engine, execution_ids: list[str], now_ms: int) -> None:
    """Mark executions QUEUED in their own transaction, retried after a lock conflict."""
    with engine.begin() as conn:
        mark_queued(conn, execution_ids, now_ms)
