"""The audit trail: one row per change made through the OpenAPI, the console or the CLI,
written in the change's own transaction (who, what, on which object, before and after
with secrets masked, when), read with filters, and pruned with executions' retention."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from common.db.rows import AnyRow
from common.db.schema import apps, audit_events
from common.documents import JsonObject, JsonValue
from common.secrets_mask import MASK, mask_text
from common.timefmt import iso_ms

# A field whose name says it holds a secret is stored as ``***`` whatever its value.
_SECRET_NAME = re.compile(r"(secret|password|token|api_?key|authorization)", re.IGNORECASE)


def masked(value: JsonValue) -> JsonValue:
    """``value`` with every secret-named field's value ``***`` and every password in a
    URL-like string masked, however deep."""
    if isinstance(value, dict):
        return {k: MASK if _SECRET_NAME.search(k) else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


@dataclass(frozen=True)
class AuditEntry:
    """One change: who made it, what it was, on which object (of which app; None for
    what reaches every app), and the object's relevant fields before and after."""

    actor: str
    action: str
    object_type: str
    object_id: str
    app_pk: int | None = None
    before: JsonObject | None = None
    after: JsonObject | None = None


def _document(doc: JsonObject | None) -> str | None:
    return None if doc is None else json.dumps(masked(doc), sort_keys=True, default=str)


def record_audit(conn: Connection, entries: Sequence[AuditEntry], at_ms: int) -> None:
    """Write ``entries`` (one INSERT) in the caller's transaction, secrets masked."""
    if not entries:
        return
    conn.execute(
        audit_events.insert(),
        [
            {
                "at": at_ms,
                "actor": e.actor[:128],
                "action": e.action,
                "object_type": e.object_type,
                "object_id": e.object_id[:255],
                "app_pk": e.app_pk,
                "before_doc": _document(e.before),
                "after_doc": _document(e.after),
            }
            for e in entries
        ],
    )


@dataclass(frozen=True)
class AuditQuery:
    """Which audit rows to read: of the apps ``app_pks`` (None: all, and the rows of no
    app), of one actor, since a time; newest first, ``limit`` of them."""

    app_pks: Collection[int] | None = None
    actor: str | None = None
    since_ms: int | None = None
    limit: int = 200
    apps_only: bool = False
    """Leave out the rows of no app (workers, operators): for a reader who is not an
    admin of every app."""


@dataclass(frozen=True)
class AuditRecord:
    """One stored audit row, with its app's id."""

    id: int
    at: int
    actor: str
    action: str
    object_type: str
    object_id: str
    app_id: str | None
    before: str | None
    after: str | None

    @classmethod
    def from_row(cls, row: AnyRow) -> AuditRecord:
        """The record of a row of ``find_audit``'s query."""
        return cls(
            int(row.id),
            int(row.at),
            str(row.actor),
            str(row.action),
            str(row.object_type),
            str(row.object_id),
            row.app_id,
            row.before_doc,
            row.after_doc,
        )

    def as_dict(self) -> dict[str, object]:
        """The fields ``kairos audit -o json`` prints."""
        return {
            "id": self.id,
            "at": iso_ms(self.at),
            "actor": self.actor,
            "action": self.action,
            "object": f"{self.object_type}:{self.object_id}",
            "appId": self.app_id,
            "before": None if self.before is None else json.loads(self.before),
            "after": None if self.after is None else json.loads(self.after),
        }


def find_audit(conn: Connection, query: AuditQuery) -> list[AuditRecord]:
    """The audit rows ``query`` asks for, newest first."""
    select = (
        sa.select(audit_events, apps.c.app_id)
        .select_from(audit_events.outerjoin(apps, apps.c.id == audit_events.c.app_pk))
        .order_by(audit_events.c.at.desc(), audit_events.c.id.desc())
        .limit(query.limit)
    )
    if query.app_pks is not None:
        select = select.where(audit_events.c.app_pk.in_(sorted(query.app_pks) or [0]))
    if query.apps_only:
        select = select.where(audit_events.c.app_pk.is_not(None))
    if query.actor is not None:
        select = select.where(audit_events.c.actor == query.actor)
    if query.since_ms is not None:
        select = select.where(audit_events.c.at >= query.since_ms)
    return [AuditRecord.from_row(r) for r in conn.execute(select)]


def prune_audit(conn: Connection, before_ms: int, limit: int) -> int:
    """Delete up to ``limit`` audit rows written before ``before_ms``."""
    keys = list(
        conn.execute(
            sa.select(audit_events.c.id).where(audit_events.c.at < before_ms).limit(limit)
        ).scalars()
    )
    if keys:
        conn.execute(audit_events.delete().where(audit_events.c.id.in_(keys)))
    return len(keys)


def record_alone(engine: Engine, entry: AuditEntry, at_ms: int) -> None:
    """Write ``entry`` in a transaction of its own: for a change made outside MySQL (a
    worker's drain in Redis), written before the change so none goes unrecorded."""
    with engine.begin() as conn:
        record_audit(conn, [entry], at_ms)


def audit_replays(
    conn: Connection,
    actor: str,
    replayed: Sequence[tuple[str, int | None]],
    status: str,
    at_ms: int,
) -> None:
    """In the caller's transaction: one ``callback.replay`` row per app for the
    deliveries (id, app row id) it started again, which were ``status`` before."""
    by_app: dict[int | None, list[str]] = {}
    for delivery_id, app_pk in replayed:
        by_app.setdefault(app_pk, []).append(delivery_id)
    entries = [
        AuditEntry(
            actor,
            "callback.replay",
            "callback" if len(ids) == 1 else "callbacks",
            ids[0] if len(ids) == 1 else f"{len(ids)} deliveries",
            app_pk,
            {"status": status},
            {"status": "PENDING/QUEUED", "deliveryIds": sorted(ids)},
        )
        for app_pk, ids in by_app.items()
    ]
    record_audit(conn, entries, at_ms)
