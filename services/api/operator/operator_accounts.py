"""Console operators as ``kairos operator`` manages them: create one with a role and an
optional app list, list them, change their role or apps, revoke one."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Connection

from common.clock import wall_ms
from common.config import StoreSettings
from common.db.apps import MySqlAppStore
from common.db.audit import AuditEntry, record_audit
from common.db.operators import (
    OperatorRecord,
    all_operators,
    create_operator,
    delete_operator,
    locked_operator_id,
    set_operator_apps,
    set_operator_role,
)
from common.documents import JsonObject
from common.errors import UnknownAppError, UnknownOperatorError, ValidationFailedError
from common.operator_roles import Role
from services.api.operator.one_transaction import in_transaction


def _app_pks(conn: Connection, app_ids: Sequence[str]) -> list[int]:
    """The row ids of the apps ``app_ids`` names. Raises ``UnknownAppError``."""
    found, apps = [], MySqlAppStore(conn)
    for app_id in app_ids:
        record = apps.app_record(app_id)
        if record is None:
            raise UnknownAppError(app_id)
        found.append(record.id)
    return found


def _audit(
    conn: Connection,
    actor: str,
    action: str,
    name: str,
    before: JsonObject | None,
    after: JsonObject | None,
) -> None:
    record_audit(
        conn, [AuditEntry(actor, action, "operator", name, None, before, after)], wall_ms()
    )


def _access(conn: Connection, name: str) -> JsonObject | None:
    """An operator's role and apps as the audit trail records them (never its token)."""
    found = next((o for o in all_operators(conn) if o.name == name), None)
    return None if found is None else {"role": found.role.value, "apps": found.app_ids or None}


def create_operator_token(
    settings: StoreSettings, name: str, role: Role, app_ids: Sequence[str] = (), *, actor: str
) -> str:
    """Create a console operator with ``role``, limited to ``app_ids`` when given; return
    its token (shown once, stored hashed). ``actor``: whom the audit trail names.
    Raises ``OperatorExistsError`` and ``UnknownAppError``."""

    def create(conn: Connection) -> str:
        pks = _app_pks(conn, app_ids) if app_ids else None
        token = create_operator(conn, name, wall_ms(), role, pks)
        _audit(conn, actor, "operator.create", name, None, _access(conn, name))
        return token

    return in_transaction(settings, create)


def operator_records(settings: StoreSettings) -> list[OperatorRecord]:
    """Every console operator with its role, apps and sessions held (never a token)."""
    return in_transaction(settings, all_operators)


def set_operator_access(
    settings: StoreSettings,
    name: str,
    role: Role | None,
    app_ids: Sequence[str] | None,
    every_app: bool = False,
    *,
    actor: str,
) -> None:
    """Change an operator's role (None: kept) and apps: ``app_ids`` replaces its list,
    ``every_app`` lifts it, neither keeps it. Its sessions follow from their next
    request. Raises ``UnknownOperatorError``, ``UnknownAppError``,
    ``ValidationFailedError``."""
    if app_ids and every_app:
        raise ValidationFailedError("--app", "give either --app or --every-app, not both")
    if role is None and not app_ids and not every_app:
        raise ValidationFailedError("--role", "give --role, --app or --every-app to change")

    def change(conn: Connection) -> None:
        operator_id = locked_operator_id(conn, name)
        if operator_id is None:
            raise UnknownOperatorError(name)
        before = _access(conn, name)
        if role is not None:
            set_operator_role(conn, operator_id, role)
        if app_ids or every_app:
            set_operator_apps(conn, operator_id, _app_pks(conn, app_ids or ()))
        _audit(conn, actor, "operator.set", name, before, _access(conn, name))

    in_transaction(settings, change)


def revoke_operator(settings: StoreSettings, name: str, *, actor: str) -> None:
    """Remove a console operator: its token stops working, its sessions end at once.
    Raises ``UnknownOperatorError``."""

    def revoke(conn: Connection) -> bool:
        before = _access(conn, name)
        removed = delete_operator(conn, name)
        if removed:
            _audit(conn, actor, "operator.revoke", name, before, None)
        return removed

    if not in_transaction(settings, revoke):
        raise UnknownOperatorError(name)
