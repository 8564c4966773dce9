"""The audit rows of job creates: one per actor and app for the jobs one transaction
stored (a group of single creates, or a batch), with the jobs' ids listed, so that the
hot create path pays one small INSERT per transaction, not one per job."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.engine import Connection

from common.db.audit import AuditEntry, record_audit

Created = tuple[str, int, int]
"""A job stored now: who created it, its app's row id, its id."""


def audit_created(conn: Connection, created: Iterable[Created], now_ms: int) -> None:
    """Write, in the caller's transaction, one ``job.create`` row per actor and app
    listing the ids of the jobs it created."""
    by_actor: dict[tuple[str, int], list[int]] = {}
    for actor, app_pk, job_id in created:
        by_actor.setdefault((actor, app_pk), []).append(job_id)
    entries = [
        AuditEntry(
            actor,
            "job.create",
            "job" if len(ids) == 1 else "jobs",
            str(ids[0]) if len(ids) == 1 else f"{min(ids)}..{max(ids)}",
            app_pk,
            None,
            {"jobIds": sorted(ids), "count": len(ids)},
        )
        for (actor, app_pk), ids in by_actor.items()
    ]
    record_audit(conn, entries, now_ms)
