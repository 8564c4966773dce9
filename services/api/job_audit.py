"""The audit rows of job control: a status change (pause, resume, cancel, delete) and a
PATCH's changed fields, before and after, written in the change's transaction."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from common.db.apps import App
from common.db.audit import AuditEntry, record_audit
from common.db.jobs import JobColumns
from common.db.records import JobRecord
from common.documents import JsonObject
from services.api.schemas import JobPatch


def audit_job(
    conn: Connection, app: App, job_id: int, action: str, before: str | None, after: str, now: int
) -> None:
    """Write the audit row of a status change of one job, in the change's transaction."""
    entry = AuditEntry(
        app.who, f"job.{action}", "job", str(job_id), app.id, {"status": before}, {"status": after}
    )
    record_audit(conn, [entry], now)


def audit_update(
    conn: Connection, app: App, job: JobRecord, columns: JobColumns, patch: JobPatch, now: int
) -> None:
    """The audit row of a PATCH: the changed columns as they were and as they are."""
    before: JsonObject = {name: getattr(job, name) for name in columns}
    after: JsonObject = dict(columns)
    if patch.after is not None:
        after["after"] = [a.model_dump() for a in patch.after]
    if before or patch.after is not None:
        entry = AuditEntry(app.who, "job.update", "job", str(job.id), app.id, before, after)
        record_audit(conn, [entry], now)
