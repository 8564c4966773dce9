"""Operators of the web console: who may sign in (a token, stored hashed), their role
and the apps they reach, and the sessions they hold (a cookie value, stored hashed, with
its CSRF token)."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from common.db.rows import AnyRow
from common.db.schema import apps, operator_apps, operators
from common.db.schema import operator_sessions as sessions
from common.errors import OperatorExistsError, ValidationFailedError
from common.operator_roles import EVERY_APP, AppScope, Role
from common.timefmt import iso_ms

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
TOKEN_PREFIX = "kop_"


@dataclass(frozen=True)
class Operator:
    """A person who may use the console: what its role allows, on the apps it reaches."""

    id: int
    name: str
    role: Role = Role.VIEWER
    scope: AppScope = EVERY_APP

    def may(self, needed: Role | str) -> bool:
        """Whether the operator's role allows what ``needed`` may do."""
        return self.role.allows(Role(needed))

    @property
    def every_app(self) -> bool:
        """Whether the operator reaches every app (no app list)."""
        return self.scope.every_app


@dataclass(frozen=True, slots=True)
class OperatorRecord:
    """An operator as ``kairos operator list`` shows it: never the token."""

    id: int
    name: str
    created_at: int
    sessions: int
    """How many sessions it holds (those past their end too, until a sign-in clears them)."""
    role: Role = Role.VIEWER
    app_ids: list[str] = field(default_factory=list)
    """The apps it is limited to, by app id; empty: every app."""

    @classmethod
    def from_row(cls, row: AnyRow, app_ids: list[str]) -> OperatorRecord:
        """The operator a row of ``all_operators``'s query holds, limited to ``app_ids``."""
        return cls(
            id=row.id,
            name=row.name,
            created_at=row.created_at,
            sessions=row.sessions,
            role=Role(row.role),
            app_ids=app_ids,
        )

    def as_dict(self) -> dict[str, object]:
        """The fields ``kairos operator list -o json`` prints (never the token)."""
        return {
            "name": self.name,
            "role": self.role.value,
            "apps": self.app_ids or None,
            "createdAt": iso_ms(self.created_at),
            "sessions": self.sessions,
        }


@dataclass(frozen=True)
class OperatorSession:
    """A signed-in browser: whose it is, the token its forms must carry, when it ends."""

    operator: Operator
    csrf_token: str
    expires_at: int
    last_seen_at: int = 0
    """When the session last made a request, as last noted (at most once a minute)."""


def digest(secret: str) -> str:
    """The stored form of a token or session value: SHA-256, hex. Both are 256 random
    bits, so a fast hash is enough: nothing can be guessed from it."""
    return hashlib.sha256(secret.encode()).hexdigest()


def checked_name(name: str) -> str:
    """An operator name: 1 to 64 letters, digits, ``.``, ``_``, ``@``, ``-``."""
    if not _NAME.fullmatch(name):
        raise ValidationFailedError(
            "NAME",
            f"{name!r} is not an operator name: use 1 to 64 letters, digits, '.', '_', '@' "
            "or '-', starting with a letter or digit",
        )
    return name


def create_operator(
    conn: Connection,
    name: str,
    now_ms: int,
    role: Role,
    app_pks: Collection[int] | None = None,
) -> str:
    """Create an operator with ``role``, limited to the apps ``app_pks`` (None: every
    app), and return its console token (shown once, stored hashed).

    Raises ``OperatorExistsError`` when the name is taken."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        created = conn.execute(
            operators.insert().values(
                name=checked_name(name),
                token_hash=digest(token),
                created_at=now_ms,
                role=role.value,
            )
        )
    except IntegrityError as e:
        raise OperatorExistsError(name) from e
    set_operator_apps(conn, int(created.lastrowid), app_pks)
    return token


def set_operator_apps(conn: Connection, operator_id: int, app_pks: Collection[int] | None) -> None:
    """Limit an operator to the apps ``app_pks`` (None or empty: every app); its
    sessions reach them from their next request."""
    conn.execute(operator_apps.delete().where(operator_apps.c.operator_id == operator_id))
    if app_pks:
        conn.execute(
            operator_apps.insert(),
            [{"operator_id": operator_id, "app_pk": pk} for pk in sorted(set(app_pks))],
        )


def locked_operator_id(conn: Connection, name: str) -> int | None:
    """The row id of the operator named ``name``, its row locked for a change; None if
    there is none."""
    found = conn.execute(
        sa.select(operators.c.id).where(operators.c.name == name).with_for_update()
    ).scalar()
    return None if found is None else int(found)


def set_operator_role(conn: Connection, operator_id: int, role: Role) -> None:
    """Give an operator ``role``; its sessions have it from their next request."""
    conn.execute(operators.update().where(operators.c.id == operator_id).values(role=role.value))


def _app_ids_by_operator(conn: Connection) -> dict[int, list[str]]:
    rows = conn.execute(
        sa.select(operator_apps.c.operator_id, apps.c.app_id)
        .join(apps, apps.c.id == operator_apps.c.app_pk)
        .order_by(apps.c.app_id)
    )
    found: dict[int, list[str]] = {}
    for row in rows:
        found.setdefault(int(row.operator_id), []).append(str(row.app_id))
    return found


def _scope_of(conn: Connection, operator_id: int) -> AppScope:
    pks = conn.execute(
        sa.select(operator_apps.c.app_pk).where(operator_apps.c.operator_id == operator_id)
    ).scalars()
    listed = [int(pk) for pk in pks]
    return AppScope.of(listed) if listed else EVERY_APP


def _operator(conn: Connection, row: AnyRow) -> Operator:
    return Operator(int(row.id), str(row.name), Role(row.role), _scope_of(conn, int(row.id)))


def all_operators(conn: Connection) -> list[OperatorRecord]:
    """Every operator (id, name, creation time) with how many sessions it holds."""
    live = (
        sa.select(sa.func.count())
        .where(sessions.c.operator_id == operators.c.id)
        .correlate(operators)
        .scalar_subquery()
    )
    columns = (operators.c.id, operators.c.name, operators.c.created_at, operators.c.role)
    query = sa.select(*columns, live.label("sessions")).order_by(operators.c.name)
    limited = _app_ids_by_operator(conn)
    return [
        OperatorRecord.from_row(row, limited.get(int(row.id), [])) for row in conn.execute(query)
    ]


def delete_operator(conn: Connection, name: str) -> bool:
    """Remove an operator; its token stops working and its sessions end. False if none."""
    found = conn.execute(sa.select(operators.c.id).where(operators.c.name == name)).scalar()
    if found is None:
        return False
    conn.execute(sessions.delete().where(sessions.c.operator_id == found))
    conn.execute(operators.delete().where(operators.c.id == found))
    return True


def operator_for_token(conn: Connection, token: str) -> Operator | None:
    """The operator whose token this is, if any."""
    row = conn.execute(
        sa.select(operators.c.id, operators.c.name, operators.c.role).where(
            operators.c.token_hash == digest(token)
        )
    ).first()
    return _operator(conn, row) if row is not None else None


def start_session(
    conn: Connection, operator: Operator, now_ms: int, lifetime_ms: int
) -> tuple[str, OperatorSession]:
    """A new session for ``operator``: the cookie value to hand the browser (stored only
    hashed) and the session with its CSRF token. Sessions already over are removed."""
    conn.execute(sessions.delete().where(sessions.c.expires_at < now_ms))
    value = secrets.token_urlsafe(32)
    session = OperatorSession(operator, secrets.token_urlsafe(32), now_ms + lifetime_ms, now_ms)
    conn.execute(
        sessions.insert().values(
            session_hash=digest(value),
            operator_id=operator.id,
            csrf_token=session.csrf_token,
            created_at=now_ms,
            expires_at=session.expires_at,
            last_seen_at=now_ms,
        )
    )
    return value, session


def find_session(
    conn: Connection, value: str, now_ms: int, idle_ms: int | None = None
) -> OperatorSession | None:
    """The session a cookie value names, while it lasts, its operator exists and (with
    ``idle_ms``) it made a request within ``idle_ms``."""
    seen = sa.func.coalesce(sessions.c.last_seen_at, sessions.c.created_at)
    query = (
        sa.select(
            operators.c.id,
            operators.c.name,
            operators.c.role,
            sessions.c.csrf_token,
            sessions.c.expires_at,
            seen.label("seen"),
        )
        .select_from(sessions.join(operators, operators.c.id == sessions.c.operator_id))
        .where(sessions.c.session_hash == digest(value), sessions.c.expires_at > now_ms)
    )
    if idle_ms is not None:
        query = query.where(seen > now_ms - idle_ms)
    row = conn.execute(query).first()
    if row is None:
        return None
    operator = _operator(conn, row)
    return OperatorSession(operator, str(row.csrf_token), int(row.expires_at), int(row.seen))


def note_session_seen(conn: Connection, value: str, now_ms: int) -> None:
    """Note that the session a cookie value names made a request at ``now_ms``."""
    conn.execute(
        sessions.update()
        .where(sessions.c.session_hash == digest(value))
        .values(last_seen_at=now_ms)
    )


def end_session(conn: Connection, value: str) -> None:
    """Sign a browser out: its session is removed."""
    conn.execute(sessions.delete().where(sessions.c.session_hash == digest(value)))
