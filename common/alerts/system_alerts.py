"""Alerts on what no one run says: a worker presumed dead, a callback gone DEAD."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Connection

from common.alerts.firing import fire_events
from common.alerts.kinds import AlertKind
from common.alerts.payload import AlertEvent
from common.alerts.rules import AlertRule
from common.db.apps import MySqlAppStore
from common.db.deliveries import DeliveryRecord, NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.documents import JsonObject
from common.operator_roles import AppScope
from common.secrets_mask import mask_text
from common.timefmt import iso_ms

ERROR_CHARS = 300


def worker_gone_event(
    worker_id: str, hostname: str, last_heartbeat: int, now_ms: int
) -> AlertEvent:
    """The event of a worker presumed dead (heartbeat stale, no consumer on its queue);
    told once per death: its last heartbeat marks it."""
    headline = (
        f"worker {worker_id} on {hostname or 'an unknown host'} is presumed dead: no "
        f"heartbeat since {iso_ms(last_heartbeat)} and no consumer on its queue"
    )
    facts: JsonObject = {
        "workerId": worker_id,
        "hostname": hostname,
        "lastHeartbeat": iso_ms(last_heartbeat),
    }
    return AlertEvent(
        AlertKind.WORKER_GONE, worker_id, None, now_ms, headline, facts, last_heartbeat
    )


def record_worker_gone(
    conn: Connection, rules: Sequence[AlertRule], events: Sequence[AlertEvent], now_ms: int
) -> list[NewDelivery]:
    """Fire the rules on workers presumed dead, in the caller's transaction; a worker
    whose death came before a rule was made is not told by it."""
    fired: list[NewDelivery] = []
    for rule in rules:
        if AlertKind.WORKER_GONE not in rule.kinds:
            continue
        told = [e for e in events if e.marker is not None and e.marker >= rule.created_at]
        fired += fire_events(conn, [rule], told, now_ms)
    return fired


def record_dead_callbacks(
    conn: Connection, rules: Sequence[AlertRule], delivery_ids: Sequence[str], now_ms: int
) -> list[NewDelivery]:
    """Fire the rules on callbacks that just went DEAD, in the transaction that recorded
    it; an alert that went DEAD fires nothing (no alert about an alert)."""
    if not delivery_ids or not any(AlertKind.DEAD_CALLBACK in r.kinds for r in rules):
        return []
    found = MySqlDeliveryStore(conn).callbacks_of(delivery_ids)
    app_pks = {d.app_pk for d in found if d.app_pk is not None}
    apps = MySqlAppStore(conn).apps_by_key(AppScope.of(app_pks))
    events = [_dead_event(d, apps[d.app_pk].app_id, now_ms) for d in found if d.app_pk in apps]
    return fire_events(conn, rules, events, now_ms)


def _dead_event(d: DeliveryRecord, app_id: str, now_ms: int) -> AlertEvent:
    answer = f"HTTP {d.last_status_code}" if d.last_status_code else "no answer"
    error = mask_text(d.last_error or "")[:ERROR_CHARS]
    reason = None if d.dead_reason is None else d.dead_reason.value
    headline = (
        f"callback {d.delivery_id} of job {d.job_id} (app {app_id}) is DEAD "
        f"({reason}) after {d.attempts} attempts; last: {answer}" + (f", {error}" if error else "")
    )
    facts: JsonObject = {
        "deliveryId": d.delivery_id,
        "jobId": d.job_id,
        "app": app_id,
        "executionId": d.execution_id,
        "url": mask_text(d.url),
        "deadReason": reason,
        "attempts": d.attempts,
        "lastStatusCode": d.last_status_code,
        "lastError": error or None,
    }
    return AlertEvent(AlertKind.DEAD_CALLBACK, str(d.job_id), d.app_pk, now_ms, headline, facts)
