"""The audit rows of changes to an app (``kairos app``): the app as operators see it
(name, handlers, callback networks, limits, disabled; never a key or secret) before and
after, in the change's transaction."""

from __future__ import annotations

import dataclasses

from sqlalchemy.engine import Connection

from common.db.apps import AppRecord, app_record
from common.db.audit import AuditEntry, record_audit
from common.documents import JsonObject


def app_document(record: AppRecord | None) -> JsonObject | None:
    """What the audit trail keeps of an app: no key, no secret."""
    if record is None:
        return None
    networks = record.callback_networks
    return {
        "name": record.name,
        "handlers": list(record.handlers.patterns),
        "callbackNetworks": None if networks is None else [str(n) for n in networks],
        "limits": dataclasses.asdict(record.limits),
        "disabled": record.disabled_at is not None,
    }


def audit_app_change(
    conn: Connection,
    actor: str,
    action: str,
    app_id: str,
    before: AppRecord | None,
    now_ms: int,
    extra: JsonObject | None = None,
) -> None:
    """Write the row of ``action`` on app ``app_id``: as it was (``before``) and as it is
    now in this transaction, with ``extra`` facts (a new key's id) added after."""
    after_record = app_record(conn, app_id)
    if after_record is None:
        return
    after = {**(app_document(after_record) or {}), **(extra or {})}
    entry = AuditEntry(actor, action, "app", app_id, after_record.id, app_document(before), after)
    record_audit(conn, [entry], now_ms)
