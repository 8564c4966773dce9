"""Replaying callbacks parked in ``kairos.callbacks.dead``: all of them, or one by its
delivery id. The CLI (``kairos callbacks replay``) and the console use this.

The dead queue is walked with unacked gets: a message to replay is published again to
the callbacks queue (attempt 1, so it walks the retry tiers anew) and acked only once
the copy is committed; every other message (another delivery's, or one no notifier can
read) is held unacked during the walk and handed back at its end, so the walk sees
each message once and the broker puts them back in their places.

A message is replayed only while its delivery is DEAD. A copy whose delivery went on
(replayed already through the API, or by delivery or job id: those start from the row)
is stale and acked away; a copy whose row retention pruned is reported (logged and
counted) and left parked: the notifier would not send it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage
from common.db.audit import audit_replays
from common.db.delivery_store import MySqlDeliveryStore
from common.messages import CallbackMessage, read_message
from common.operator_roles import EVERY_APP, AppScope
from common.states import DeliveryStatus
from common.topology import CALLBACKS_DEAD_QUEUE, CALLBACKS_EXCHANGE, CALLBACKS_QUEUE, declare_core

log = logging.getLogger(__name__)

PUBLISH_BATCH = 100
SCAN_LIMIT = 100_000


@dataclass
class ReplayReport:
    """What a replay did: messages sent back, and what it left in the dead queue."""

    replayed: int = 0
    unreadable: int = 0
    """messages no notifier can read (left parked: sent back, they would return)"""
    looked_at: int = 0
    stale: int = 0
    """copies of deliveries no longer DEAD (replayed another way): acked away"""
    pruned: int = 0
    """copies whose delivery row retention deleted: left parked, and logged"""
    replayed_ids: list[str] = field(default_factory=list)


@dataclass
class _Walk:
    channel: BlockingChannel
    publisher: BatchPublisher
    engine: Engine
    scope: AppScope = EVERY_APP
    report: ReplayReport = field(default_factory=ReplayReport)
    apps: dict[str, int | None] = field(default_factory=dict)
    """Each delivery's app row id, as read before its copy is sent again."""
    held: list[int] = field(default_factory=list)
    batch: list[tuple[int, CallbackMessage]] = field(default_factory=list)


def replay_dead(
    connection: BlockingConnection,
    engine: Engine,
    now_ms: int,
    limit: int,
    delivery_id: str | None = None,
    scope: AppScope = EVERY_APP,
    *,
    actor: str,
) -> ReplayReport:
    """Send up to ``limit`` dead callbacks back to the callbacks queue (only the one with
    ``delivery_id`` when given, only those of the apps in ``scope``) and mark their
    deliveries QUEUED again, with their audit rows (``actor``: whom they name)."""
    channel = connection.channel()
    declare_core(channel)
    walk = _Walk(channel, BatchPublisher(connection.channel()), engine, scope)
    try:
        _walk(walk, limit, delivery_id)
        _send(walk)
    finally:
        if walk.held and channel.is_open:
            channel.basic_nack(delivery_tag=max(walk.held), multiple=True, requeue=True)
    if walk.report.replayed_ids:
        with engine.begin() as conn:
            MySqlDeliveryStore(conn).mark_replayed(walk.report.replayed_ids, now_ms)
            replayed = [(d, walk.apps[d]) for d in walk.report.replayed_ids]
            audit_replays(conn, actor, replayed, DeliveryStatus.DEAD.value, now_ms)
    return walk.report


def _walk(walk: _Walk, limit: int, delivery_id: str | None) -> None:
    report = walk.report
    while report.replayed + len(walk.batch) < limit and report.looked_at < SCAN_LIMIT:
        method, _properties, body = walk.channel.basic_get(CALLBACKS_DEAD_QUEUE, auto_ack=False)
        if method is None:
            return
        report.looked_at += 1
        message = read_message(CallbackMessage, body)
        if message is None:
            report.unreadable += 1
            walk.held.append(method.delivery_tag)
        elif delivery_id is not None and message.delivery_id != delivery_id:
            walk.held.append(method.delivery_tag)
        elif not _still_dead(walk, method.delivery_tag, message):
            continue
        else:
            walk.batch.append((method.delivery_tag, message))
            if delivery_id is not None:
                return
            if len(walk.batch) >= PUBLISH_BATCH:
                _send(walk)


def _still_dead(walk: _Walk, tag: int, message: CallbackMessage) -> bool:
    """Whether the copy's delivery is DEAD and not in this walk's batch already; settles
    a stale copy (acked) or a pruned one (held, reported) otherwise."""
    report = walk.report
    if any(m.delivery_id == message.delivery_id for _t, m in walk.batch) or (
        message.delivery_id in report.replayed_ids
    ):
        walk.channel.basic_ack(tag)
        report.stale += 1
        return False
    with walk.engine.connect() as conn:
        delivery = MySqlDeliveryStore(conn).get_delivery(message.delivery_id)
    if delivery is not None and not walk.scope.includes(delivery.app_pk):
        # Another app's: left in its place, as a copy of another delivery id is.
        walk.held.append(tag)
        return False
    if delivery is None:
        log.warning(
            "dead callback of a pruned delivery left parked",
            extra={"delivery_id": message.delivery_id},
        )
        report.pruned += 1
        walk.held.append(tag)
        return False
    if delivery.status is not DeliveryStatus.DEAD:
        walk.channel.basic_ack(tag)
        report.stale += 1
        return False
    walk.apps[message.delivery_id] = delivery.app_pk
    return True


def _send(walk: _Walk) -> None:
    """Publish the batch again and ack each dead copy once its copy is committed."""
    if not walk.batch:
        return
    messages = [
        OutgoingMessage(
            CALLBACKS_EXCHANGE,
            CALLBACKS_QUEUE,
            message.model_copy(update={"attempt": 1}).model_dump_json().encode(),
            message.delivery_id,
        )
        for _tag, message in walk.batch
    ]
    returned = walk.publisher.publish(messages)
    for tag, message in walk.batch:
        if message.delivery_id in returned:
            walk.held.append(tag)
            continue
        walk.channel.basic_ack(tag)
        walk.report.replayed += 1
        walk.report.replayed_ids.append(message.delivery_id)
    walk.batch.clear()
    if returned:
        log.warning("the broker could not route %d replayed callbacks", len(returned))
