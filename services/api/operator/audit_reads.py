"""Reading the audit trail, as ``kairos audit`` and the console's audit page do: by app,
actor and time, within the apps the reader reaches."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from common.db.apps import MySqlAppStore
from common.db.audit import AuditQuery, AuditRecord, find_audit
from common.errors import UnknownAppError
from common.operator_roles import EVERY_APP, AppScope

LIMIT = 200


def read_audit(
    engine: Engine,
    app_id: str | None = None,
    actor: str | None = None,
    since_ms: int | None = None,
    limit: int = LIMIT,
    scope: AppScope = EVERY_APP,
    apps_only: bool = False,
) -> list[AuditRecord]:
    """The newest ``limit`` audit rows, of ``app_id``'s objects (``UnknownAppError`` for
    an app out of ``scope``, as for none), by ``actor``, since ``since_ms``, within
    ``scope`` (without the rows of no app when ``apps_only``)."""
    with engine.connect() as conn:
        app_pks = scope.app_pks
        if app_id is not None:
            found = MySqlAppStore(conn).app_record(app_id)
            if found is None or not scope.includes(found.id):
                raise UnknownAppError(app_id)
            app_pks = frozenset({found.id})
        query = AuditQuery(app_pks, actor, since_ms, limit, apps_only or app_pks is not None)
        return find_audit(conn, query)
