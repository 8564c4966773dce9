"""Alerts on what no one run says: a worker presumed dead, a callback gone DEAD."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.alerts.firing import fire_events
from common.alerts.kinds import AlertKind
from common.alerts.payload import AlertEvent
from common.alerts.rules import AlertRule
from common.db.deliveries import NewDelivery
from common.db.rows import AnyRow
from common.db.schema import apps, callback_deliveries
from common.documents import JsonObject
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
    d = callback_deliveries
    rows = conn.execute(
        sa.select(
            d.c.delivery_id,
            d.c.job_id,
            d.c.app_pk,
            d.c.execution_id,
            d.c.url,
            d.c.last_status_code,
            d.c.last_error,
            d.c.dead_reason,
            d.c.attempts,
            apps.c.app_id,
        )
        .select_from(d.join(apps, apps.c.id == d.c.app_pk))
        .where(d.c.delivery_id.in_(sorted(delivery_ids)), d.c.alert_rule_pk.is_(None))
    ).all()
    events = [_dead_event(row, now_ms) for row in rows]
    return fire_events(conn, rules, events, now_ms)


def _dead_event(row: AnyRow, now_ms: int) -> AlertEvent:
    m = row._mapping
    answer = f"HTTP {m['last_status_code']}" if m["last_status_code"] else "no answer"
    error = mask_text(str(m["last_error"] or ""))[:ERROR_CHARS]
    headline = (
        f"callback {m['delivery_id']} of job {m['job_id']} (app {m['app_id']}) is DEAD "
        f"({m['dead_reason']}) after {m['attempts']} attempts; last: {answer}"
        + (f", {error}" if error else "")
    )
    facts: JsonObject = {
        "deliveryId": m["delivery_id"],
        "jobId": m["job_id"],
        "app": m["app_id"],
        "executionId": m["execution_id"],
        "url": mask_text(str(m["url"])),
        "deadReason": m["dead_reason"],
        "attempts": m["attempts"],
        "lastStatusCode": m["last_status_code"],
        "lastError": error or None,
    }
    return AlertEvent(
        AlertKind.DEAD_CALLBACK, str(m["job_id"]), m["app_pk"], now_ms, headline, facts
    )
