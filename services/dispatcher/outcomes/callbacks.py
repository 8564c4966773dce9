"""Callback deliveries: the payload for a finished execution and the message to send it."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence

from sqlalchemy.engine import Connection, Engine

from common.broker import OutgoingMessage, Publisher
from common.clock import ClusterClock
from common.db import deliveries
from common.db.deliveries import UNLABELLED, JobLabel, NewDelivery, insert_deliveries, job_labels
from common.db.executions import NewExecution
from common.db.jobs import trigger_settings
from common.db.retry import retry_conflicts
from common.documents import JsonObject, JsonValue
from common.jsontext import read_stored_json
from common.messages import CallbackMessage, ExecutionResult
from common.states import ExecutionStatus
from common.timefmt import iso_ms
from common.topology import CALLBACKS_EXCHANGE, CALLBACKS_QUEUE

log = logging.getLogger(__name__)

REPUBLISH_LIMIT = 500
# The worker id a callback names for a trigger no worker ran (its claim ended it).
CLAIM_SENDER = "dispatcher"


EVENT_TYPE = "execution.finished"
# A result longer than this (as stored JSON text) is left out of the callback (null,
# with ``resultOmitted``): the receiver reads it with GET /openapi/executions/{id}.
MAX_RESULT_CHARS = 16 * 1024


def _bounded_result(raw: str | None) -> tuple[JsonValue, bool]:
    """The result as JSON for the callback, and whether it was left out for its size."""
    if raw is None:
        return None, False
    if len(raw) > MAX_RESULT_CHARS:
        return None, True
    try:
        return read_stored_json(raw), False
    except ValueError:
        return raw, False


def callback_payload(
    result: ExecutionResult, attempt: int, trigger_time: int, job: JobLabel
) -> str:
    """The JSON body a callback receiver gets, exactly as it is signed: a Standard
    Webhooks envelope (``type``, ``timestamp``, ``data``)."""
    value, omitted = _bounded_result(result.result)
    data: JsonObject = {
        "jobId": result.job_id,
        "jobName": job.job_name,
        "clientRequestId": job.client_request_id,
        "executionId": result.execution_id,
        "attempt": attempt,
        "status": result.status,
        "message": result.message,
        "result": value,
        "triggerTime": iso_ms(trigger_time),
        "startedAt": iso_ms(result.started_at),
        "endedAt": iso_ms(result.ended_at),
    }
    if omitted:
        data["resultOmitted"] = True
    body = {"type": EVENT_TYPE, "timestamp": iso_ms(result.ended_at), "data": data}
    return json.dumps(body, separators=(",", ":"))


def new_delivery(result: ExecutionResult, app_pk: int, url: str, payload: str) -> NewDelivery:
    """A delivery record for one finished execution of a job with a callback URL."""
    return NewDelivery(
        delivery_id="msg_" + uuid.uuid4().hex,
        execution_id=result.execution_id,
        job_id=result.job_id,
        app_pk=int(app_pk),
        url=url,
        payload=payload,
    )


def record_claim_failures(conn: Connection, ended: Sequence[NewExecution], now_ms: int) -> None:
    """Callback deliveries for triggers a claim itself ended FAILED (a schedule that cannot
    be computed), as for any trigger's last attempt, in the claim's transaction.

    They are recorded PENDING: the claim thread owns no broker channel, and the sweep
    that publishes again deliveries never confirmed in the callbacks queue sends them.
    """
    failed = [e for e in ended if e.status is ExecutionStatus.FAILED]
    jobs = trigger_settings(conn, [e.job_id for e in failed]) if failed else {}
    labels = job_labels(conn, [j.id for j in jobs.values() if j.callback_url])
    wanted = []
    for execution in failed:
        job = jobs.get(execution.job_id)
        if job is None or not job.callback_url:
            continue
        result = ExecutionResult(
            execution_id=execution.execution_id,
            job_id=execution.job_id,
            worker_id=CLAIM_SENDER,
            status=ExecutionStatus.FAILED,
            message=execution.message,
            started_at=now_ms,
            ended_at=now_ms,
        )
        label = labels.get(execution.job_id, UNLABELLED)
        payload = callback_payload(result, execution.attempt, execution.trigger_time, label)
        wanted.append(new_delivery(result, job.app_pk, job.callback_url, payload))
    insert_deliveries(conn, wanted, now_ms)


def callback_message(delivery: NewDelivery) -> OutgoingMessage:
    """The message that hands a delivery to the notifier."""
    message = CallbackMessage(
        delivery_id=delivery.delivery_id,
        app_pk=delivery.app_pk,
        url=delivery.url,
        payload=delivery.payload,
        job_id=delivery.job_id,
    )
    return OutgoingMessage(
        exchange=CALLBACKS_EXCHANGE,
        routing_key=CALLBACKS_QUEUE,
        body=message.model_dump_json().encode(),
        message_id=delivery.delivery_id,
    )


def publish_deliveries(
    engine: Engine,
    publisher: Publisher,
    clock: ClusterClock,
    rows: Sequence[NewDelivery],
) -> None:
    """Publish deliveries, then mark them QUEUED; unpublished ones stay PENDING for the sweep."""
    if not rows:
        return
    publisher.publish([callback_message(r) for r in rows])
    _mark_queued(engine, clock, [r.delivery_id for r in rows])


@retry_conflicts("results")
def _mark_queued(engine: Engine, clock: ClusterClock, delivery_ids: Sequence[str]) -> None:
    """Mark published deliveries QUEUED, in a transaction of its own that a notifier's
    record of the same delivery may meet (it waits or runs again; it is not an outage)."""
    with engine.begin() as conn:
        deliveries.mark_queued(conn, delivery_ids, clock.now_ms())


def republish_stale_deliveries(
    engine: Engine, publisher: Publisher, clock: ClusterClock, after_ms: int
) -> None:
    """Hand the notifier again callbacks recorded but never confirmed in its queue
    (the results consumer stopped between its commit and its publish).

    Deliveries another transaction holds (a results consumer paused between its publish
    and its mark) are passed over and left to a later pass: waiting on them could keep
    the leader's sweep past its stall limit. A publish that fails rolls the marks back.
    """
    with engine.begin() as conn:
        rows = deliveries.stale_pending(conn, clock.now_ms() - after_ms, REPUBLISH_LIMIT, lock=True)
        if not rows:
            return
        # A PENDING delivery that was attempted before is an operator's replay, sent as
        # asked; one never attempted was lost between its record and its publish.
        replayed = sum(1 for r in rows if r.attempts > 0)
        if replayed:
            log.info("sending %d replayed callback deliveries", replayed)
        if len(rows) > replayed:
            log.warning(
                "republishing %d callback deliveries never confirmed in the notifier's queue",
                len(rows) - replayed,
            )
        publisher.publish([callback_message(r.as_new()) for r in rows])
        deliveries.mark_queued(conn, [r.delivery_id for r in rows], clock.now_ms())
