"""Callback deliveries: created for an ended execution, its payload, the message to send it."""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection, Engine

from common.alerts.rules import RuleSource
from common.alerts.run_alerts import RunEndFact, record_run_alerts
from common.broker import OutgoingMessage, Publisher
from common.clock import ClusterClock
from common.db.deliveries import UNLABELLED, JobLabel, NewDelivery
from common.db.delivery_store import MySqlDeliveryTransactions
from common.db.executions import NewExecution
from common.db.jobs import TriggerSettings
from common.db.outcome_store import MySqlOutcomeStore, OutcomeStore
from common.db.retry import retry_conflicts
from common.documents import JsonObject, JsonValue
from common.jsontext import read_stored_json
from common.messages import (
    ALERTS_APP_PK,
    CALLBACK_PACK_MAX,
    CallbackMessage,
    CallbackPack,
    ExecutionResult,
)
from common.states import DeliveryStatus, ExecutionStatus
from common.timefmt import iso_ms
from common.topology import CALLBACK_PACKS_QUEUE, CALLBACKS_EXCHANGE, CALLBACKS_QUEUE

log = logging.getLogger(__name__)

REPUBLISH_LIMIT = 500


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


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How an execution ended, as its callback tells it: reported by its worker, or
    settled by a claim that ended its trigger (no worker ran it)."""

    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    status: ExecutionStatus
    message: str | None
    result: str | None
    started_at: int
    ended_at: int
    # The run's W3C traceparent, which its callback sends; None: not traced.
    traceparent: str | None = None

    @classmethod
    def of_result(
        cls,
        result: ExecutionResult,
        attempt: int,
        trigger_time: int,
        traceparent: str | None = None,
    ) -> RunEnd:
        """The end a worker reported for an execution of ``attempt`` at ``trigger_time``."""
        return cls(
            result.execution_id,
            result.job_id,
            attempt,
            trigger_time,
            result.status,
            result.message,
            result.result,
            result.started_at,
            result.ended_at,
            traceparent,
        )

    @classmethod
    def of_claim(cls, execution: NewExecution, now_ms: int) -> RunEnd:
        """The end of an execution a claim wrote final at ``now_ms``, with its message."""
        return cls(
            execution.execution_id,
            execution.job_id,
            execution.attempt,
            execution.trigger_time,
            execution.status,
            execution.message,
            None,
            now_ms,
            now_ms,
            execution.traceparent,
        )


def callback_payload(end: RunEnd, job: JobLabel) -> str:
    """The JSON body a callback receiver gets, exactly as it is signed: a Standard
    Webhooks envelope (``type``, ``timestamp``, ``data``)."""
    value, omitted = _bounded_result(end.result)
    data: JsonObject = {
        "jobId": end.job_id,
        "jobName": job.job_name,
        "clientRequestId": job.client_request_id,
        "executionId": end.execution_id,
        "attempt": end.attempt,
        "status": end.status,
        "message": end.message,
        "result": value,
        "triggerTime": iso_ms(end.trigger_time),
        "startedAt": iso_ms(end.started_at),
        "endedAt": iso_ms(end.ended_at),
    }
    if omitted:
        data["resultOmitted"] = True
    body = {"type": EVENT_TYPE, "timestamp": iso_ms(end.ended_at), "data": data}
    return json.dumps(body, separators=(",", ":"))


def create_deliveries(
    store: OutcomeStore,
    ended: Sequence[tuple[RunEnd, TriggerSettings]],
    now_ms: int,
    status: DeliveryStatus = DeliveryStatus.PENDING,
) -> list[NewDelivery]:
    """Record, in the caller's transaction, a callback delivery for each ended execution
    whose job (``TriggerSettings``) has a callback URL; the deliveries made.

    Every delivery comes from here: a worker's result recorded (QUEUED: the results
    consumer publishes it after the commit, see ``leave_recorded_before_to_the_sweep``), and a
    trigger a claim itself ended FAILED (PENDING: the sweep publishes it).
    """
    wanted = [(end, job) for end, job in ended if job.callback_url]
    if not wanted:
        return []
    job_ids = [job.id for _, job in wanted]
    labels = store.job_labels(job_ids)
    # Read before this batch's own are written. A job's runs that end one after the
    # other are recorded one after the other (FORBID and QUEUE: the next run is sent
    # only once this record commits), so a later run's callback sees this one.
    on_their_way = store.jobs_with_callbacks_on_their_way(job_ids)
    recorded_here = Counter(job_ids)
    deliveries = [
        _delivery(
            end,
            job,
            labels.get(job.id, UNLABELLED),
            alone=job.id not in on_their_way and recorded_here[job.id] == 1,
        )
        for end, job in wanted
    ]
    store.insert_deliveries(deliveries, now_ms, status)
    return deliveries


def _delivery(end: RunEnd, job: TriggerSettings, label: JobLabel, alone: bool) -> NewDelivery:
    """The delivery of one ended execution to its job's callback URL."""
    assert job.callback_url
    return NewDelivery(
        delivery_id="msg_" + uuid.uuid4().hex,
        execution_id=end.execution_id,
        job_id=end.job_id,
        app_pk=int(job.app_pk),
        url=job.callback_url,
        payload=callback_payload(end, label),
        traceparent=end.traceparent,
        alone=alone,
    )


def record_claim_failures(
    conn: Connection,
    ended: Sequence[NewExecution],
    now_ms: int,
    alerts: RuleSource | None = None,
) -> None:
    """Callback deliveries for triggers a claim itself ended FAILED (a schedule that cannot
    be computed), as for any trigger's last attempt, in the claim's transaction, and the
    alerts they fire through the rules of ``alerts``.

    They are recorded PENDING: the claim thread owns no broker channel, and the sweep
    that publishes again deliveries never confirmed in the callbacks queue sends them.
    """
    failed = [e for e in ended if e.status is ExecutionStatus.FAILED]
    if not failed:
        return
    store = MySqlOutcomeStore(conn)
    jobs = store.trigger_settings([e.job_id for e in failed])
    ends = [(RunEnd.of_claim(e, now_ms), jobs[e.job_id]) for e in failed if e.job_id in jobs]
    create_deliveries(store, ends, now_ms)
    rules = alerts.rules() if alerts is not None else ()
    if rules:
        facts = [_claim_end_fact(end, job) for end, job in ends]
        record_run_alerts(conn, rules, facts, now_ms)


def _claim_end_fact(end: RunEnd, job: TriggerSettings) -> RunEndFact:
    """A trigger a claim ended, as an alert on it tells it (no worker ran it)."""
    return RunEndFact(
        end.job_id,
        job.app_pk,
        job.app_id,
        end.execution_id,
        end.attempt,
        end.status,
        end.message,
        "",
        end.ended_at,
    )


def _message_of(delivery: NewDelivery) -> CallbackMessage:
    """What the notifier is told of a delivery."""
    return CallbackMessage(
        delivery_id=delivery.delivery_id,
        app_pk=delivery.app_pk if delivery.app_pk is not None else ALERTS_APP_PK,
        url=delivery.url,
        payload=delivery.payload,
        job_id=delivery.job_id,
        alert_rule_pk=delivery.alert_rule_pk,
        traceparent=delivery.traceparent,
        alone=delivery.alone,
    )


def callback_message(delivery: NewDelivery) -> OutgoingMessage:
    """The message that hands one delivery to the notifier."""
    return OutgoingMessage(
        exchange=CALLBACKS_EXCHANGE,
        routing_key=CALLBACKS_QUEUE,
        body=_message_of(delivery).model_dump_json().encode(),
        message_id=delivery.delivery_id,
    )


def callback_messages(rows: Sequence[NewDelivery]) -> list[OutgoingMessage]:
    """The messages that hand ``rows`` to the notifier: the callbacks of one app to one
    URL in packs of up to ``CALLBACK_PACK_MAX`` (one message, one ack, for what would be
    as many), to the packs' queue; alerts, and a callback with no other of its app and
    URL in ``rows``, alone, to the callbacks queue.

    A pack holds one app's callbacks to one URL only, so that a slow receiver holds
    back the acks of its own app's packs, never another's; a job's callbacks keep their
    order within it.
    """
    groups: dict[tuple[int, str], list[NewDelivery]] = {}
    singles: list[OutgoingMessage] = []
    for row in rows:
        if row.app_pk is None or row.alert_rule_pk is not None:
            singles.append(callback_message(row))
        else:
            groups.setdefault((row.app_pk, row.url), []).append(row)
    packs: list[OutgoingMessage] = []
    for group in groups.values():
        for first in range(0, len(group), CALLBACK_PACK_MAX):
            chunk = group[first : first + CALLBACK_PACK_MAX]
            packs.append(_pack_message(chunk) if len(chunk) > 1 else callback_message(chunk[0]))
    return packs + singles


def _pack_message(rows: Sequence[NewDelivery]) -> OutgoingMessage:
    """One message carrying the callbacks of ``rows`` (one app, one URL), to the packs'
    queue."""
    pack = CallbackPack(callbacks=[_message_of(row) for row in rows])
    return OutgoingMessage(
        exchange=CALLBACKS_EXCHANGE,
        routing_key=CALLBACK_PACKS_QUEUE,
        body=pack.model_dump_json().encode(),
        message_id="pack_" + rows[0].delivery_id,
    )


def publish_deliveries(
    engine: Engine,
    publisher: Publisher,
    clock: ClusterClock,
    rows: Sequence[NewDelivery],
) -> None:
    """Publish deliveries, then mark the alerts among them QUEUED (unpublished ones stay
    PENDING for the sweep). A run's callback was recorded QUEUED already: should this
    publish not happen, its results come back and ``leave_recorded_before_to_the_sweep``
    hands it to the sweep.
    """
    if not rows:
        return
    publisher.publish(callback_messages(rows))
    alerts = [r.delivery_id for r in rows if r.alert_rule_pk is not None]
    if alerts:
        _mark_queued(engine, clock, alerts)


@retry_conflicts("results")
def leave_recorded_before_to_the_sweep(
    engine: Engine, clock: ClusterClock, execution_ids: Collection[str]
) -> int:
    """Hand the sweep the callbacks of these executions that are QUEUED with no attempt
    yet (PENDING again, as of now); how many. For results the broker hands out again
    (``redelivered``) that were recorded already: the consumer that recorded them may
    have stopped between its commit and its publish.

    The sweep publishes those still PENDING after its delay
    (``republish_stale_deliveries``), as copies a notifier reads before its attempt: a
    callback that was published after all is delivered by then, or its attempt is
    recorded, and is not posted twice.
    """
    if not execution_ids:
        return 0
    with MySqlDeliveryTransactions(engine).transaction() as store:
        moved = store.return_unattempted_to_pending(execution_ids, clock.now_ms())
    if moved:
        log.warning(
            "%d callbacks of results recorded before their redelivery left to the sweep", moved
        )
    return moved


@retry_conflicts("results")
def _mark_queued(engine: Engine, clock: ClusterClock, delivery_ids: Sequence[str]) -> None:
    """Mark published deliveries QUEUED, in a transaction of its own that a notifier's
    record of the same delivery may meet (it waits or runs again; it is not an outage)."""
    with MySqlDeliveryTransactions(engine).transaction() as store:
        store.confirm_queued(delivery_ids, clock.now_ms())


def republish_stale_deliveries(
    engine: Engine, publisher: Publisher, clock: ClusterClock, after_ms: int
) -> None:
    """Hand the notifier again callbacks recorded but never confirmed in its queue
    (the results consumer stopped between its commit and its publish).

    Deliveries another transaction holds (a results consumer paused between its publish
    and its mark) are passed over and left to a later pass: waiting on them could keep
    the leader's sweep past its stall limit. A publish that fails rolls the marks back.
    """
    with MySqlDeliveryTransactions(engine).transaction() as store:
        rows = store.stale_pending(clock.now_ms() - after_ms, REPUBLISH_LIMIT, lock=True)
        if not rows:
            return
        # A PENDING delivery that was attempted before is an operator's replay, sent as
        # asked; one never attempted was lost between its record and its publish.
        replayed = sum(1 for r in rows if r.attempts > 0)
        if replayed:
            log.info("sending %d replayed callback deliveries", replayed)
        # Alerts of dead callbacks are recorded by the notifier and sent from here.
        alerts = sum(1 for r in rows if r.attempts == 0 and r.alert_rule_pk is not None)
        if alerts:
            log.info("sending %d alerts recorded without a publish", alerts)
        if len(rows) > replayed + alerts:
            log.warning(
                "republishing %d callback deliveries never confirmed in the notifier's queue",
                len(rows) - replayed - alerts,
            )
        publisher.publish([callback_message(r.as_new()) for r in rows])
        store.confirm_queued([r.delivery_id for r in rows], clock.now_ms())
