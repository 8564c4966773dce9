"""Apps: who may call the OpenAPI, with which API key, which handlers their jobs may
name, and how callbacks are signed (their networks and limits: ``app_grants``)."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.callback_urls import IPNetwork, networks_from_stored
from common.db.app_grants import LIMIT_COLUMNS
from common.db.job_control import ACTIVE
from common.db.records import NO_LIMITS, AppLimits
from common.db.rows import AnyRow
from common.db.schema import api_keys, apps, jobs
from common.handler_patterns import NO_HANDLER, HandlerPatterns


@dataclass(frozen=True)
class AppCredentials:
    """What ``kairos app create`` prints once; the API key is never stored in clear."""

    app_id: str
    api_key: str
    signing_secret: str
    key_id: str = ""


@dataclass(frozen=True)
class App:
    """An app as the API sees it after authentication."""

    id: int
    app_id: str
    name: str
    handlers: HandlerPatterns = NO_HANDLER
    # Set by `kairos app disable`: the API refuses every call (403).
    disabled: bool = False
    # How long after the lookup the key the request carried stops working (an
    # overlapping rotation), in ms; None: until it is revoked.
    key_expires_in_ms: int | None = None
    # The networks its callbacks may reach although not public; None: the default.
    callback_networks: tuple[IPNetwork, ...] | None = None
    limits: AppLimits = NO_LIMITS
    # Who acts as this app, for the audit trail: the API key's id on the OpenAPI; an
    # operator's name (console) or cli:<os user> when an operator acts as the job's app.
    actor: str = ""

    @property
    def who(self) -> str:
        """The actor the audit trail names for what is done as this app."""
        return self.actor or f"app:{self.app_id}"


@dataclass(frozen=True, slots=True)
class AppRecord:
    """An app as operators list it: no key, no secret."""

    app_id: str
    name: str
    created_at: int
    handlers: HandlerPatterns
    disabled_at: int | None
    callback_networks: tuple[IPNetwork, ...] | None = None
    limits: AppLimits = NO_LIMITS
    id: int = 0

    @classmethod
    def from_row(cls, row: AnyRow) -> AppRecord:
        """The app a row of ``APP_RECORD_COLUMNS`` holds."""
        return cls(
            app_id=row.app_id,
            name=row.name,
            created_at=row.created_at,
            handlers=HandlerPatterns.from_stored(row.handler_patterns),
            disabled_at=row.disabled_at,
            callback_networks=networks_from_stored(row.callback_networks),
            limits=AppLimits.from_row(row),
            id=int(row.id),
        )


APP_RECORD_COLUMNS = (
    apps.c.id,
    apps.c.app_id,
    apps.c.name,
    apps.c.created_at,
    apps.c.handler_patterns,
    apps.c.disabled_at,
    apps.c.callback_networks,
    *LIMIT_COLUMNS,
)


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """One of an app's API keys as operators list it: its id and times, never the key."""

    key_id: str
    created_at: int
    expires_at: int | None
    revoked_at: int | None

    @classmethod
    def from_row(cls, row: AnyRow) -> ApiKeyRecord:
        """The key a row of ``app_keys``'s query holds."""
        return cls(
            key_id=row.key_id,
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
        )


@dataclass(frozen=True)
class NewApiKey:
    """A key just made: its public id (to revoke it by) and the key, shown once."""

    key_id: str
    api_key: str


def hash_api_key(api_key: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_api_key() -> str:
    """A fresh API key, shown once and stored only as its hash."""
    return "kairos_" + secrets.token_urlsafe(32)


def new_signing_secret() -> str:
    """A fresh Standard Webhooks signing secret (32 random bytes)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_key_id() -> str:
    """The public id of an API key, which names it in `kairos app keys` and revoke-key."""
    return "key_" + secrets.token_hex(8)


def _add_key(conn: Connection, app_pk: int, api_key: str, now_ms: int) -> str:
    key_id = new_key_id()
    conn.execute(
        api_keys.insert().values(
            key_id=key_id, app_pk=app_pk, key_hash=hash_api_key(api_key), created_at=now_ms
        )
    )
    return key_id


def create_app(
    conn: Connection, name: str, now_ms: int, handlers: HandlerPatterns
) -> AppCredentials:
    """Create an app with a fresh API key and a Standard Webhooks signing secret; its
    jobs may name the handlers ``handlers`` match (``NO_HANDLER``: none until granted)."""
    app_id = "app_" + secrets.token_hex(8)
    api_key = new_api_key()
    signing_secret = new_signing_secret()
    result = conn.execute(
        apps.insert().values(
            app_id=app_id,
            name=name,
            api_key_hash=hash_api_key(api_key),
            signing_secret=signing_secret,
            created_at=now_ms,
            handler_patterns=handlers.stored(),
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    key_id = _add_key(conn, int(key[0]), api_key, now_ms)
    return AppCredentials(app_id, api_key, signing_secret, key_id)


def _app_pk(conn: Connection, app_id: str) -> int | None:
    value = conn.execute(sa.select(apps.c.id).where(apps.c.app_id == app_id)).scalar()
    return int(value) if value is not None else None


def rotate_api_key(conn: Connection, app_id: str, now_ms: int, until_ms: int) -> NewApiKey | None:
    """Give the app a new API key; its other keys keep working until ``until_ms`` (or
    their own earlier end). None if no such app."""
    app_pk = _app_pk(conn, app_id)
    if app_pk is None:
        return None
    api_key = new_api_key()
    live = sa.and_(
        api_keys.c.app_pk == app_pk,
        api_keys.c.revoked_at.is_(None),
        sa.or_(api_keys.c.expires_at.is_(None), api_keys.c.expires_at > until_ms),
    )
    conn.execute(api_keys.update().where(live).values(expires_at=until_ms))
    key_id = _add_key(conn, app_pk, api_key, now_ms)
    conn.execute(
        apps.update().where(apps.c.id == app_pk).values(api_key_hash=hash_api_key(api_key))
    )
    return NewApiKey(key_id, api_key)


def revoke_api_key(conn: Connection, app_id: str, key_id: str, now_ms: int) -> bool:
    """Stop one of the app's keys; False if the app has no such key."""
    app_pk = _app_pk(conn, app_id)
    if app_pk is None:
        return False
    found = conn.execute(
        sa.select(api_keys.c.revoked_at).where(
            api_keys.c.app_pk == app_pk, api_keys.c.key_id == key_id
        )
    ).first()
    if found is None:
        return False
    if found.revoked_at is None:
        conn.execute(
            api_keys.update()
            .where(api_keys.c.app_pk == app_pk, api_keys.c.key_id == key_id)
            .values(revoked_at=now_ms)
        )
    return True


def app_keys(conn: Connection, app_id: str) -> list[ApiKeyRecord] | None:
    """The app's API keys (id, created, expires, revoked; never the key), oldest first;
    None if no such app."""
    app_pk = _app_pk(conn, app_id)
    if app_pk is None:
        return None
    columns = (api_keys.c.key_id, api_keys.c.created_at, api_keys.c.expires_at)
    query = sa.select(*columns, api_keys.c.revoked_at).where(api_keys.c.app_pk == app_pk)
    return [ApiKeyRecord.from_row(row) for row in conn.execute(query.order_by(api_keys.c.id))]


def set_disabled(conn: Connection, app_id: str, disabled_at: int | None) -> bool:
    """Disable the app at ``disabled_at`` (None enables it); False if no such app."""
    result = conn.execute(
        apps.update().where(apps.c.app_id == app_id).values(disabled_at=disabled_at)
    )
    return bool(result.rowcount)


def all_apps(conn: Connection) -> list[AppRecord]:
    """Every app (id, name, creation time, handler patterns, when it was disabled, its
    callback networks and limits), oldest first; no secrets."""
    query = sa.select(*APP_RECORD_COLUMNS).order_by(apps.c.id)
    return [AppRecord.from_row(row) for row in conn.execute(query)]


def app_record(conn: Connection, app_id: str) -> AppRecord | None:
    """One app as ``all_apps`` lists it; None if no such app."""
    row = conn.execute(sa.select(*APP_RECORD_COLUMNS).where(apps.c.app_id == app_id)).first()
    return None if row is None else AppRecord.from_row(row)


# The database's clock in epoch ms: keys end by it, so authentication needs only MySQL.
DB_NOW_MS = sa.cast(sa.func.unix_timestamp(sa.func.now(3)) * 1000, sa.BigInteger)


def database_now_ms(conn: Connection) -> int:
    """The database's time in epoch ms, the clock API keys end by."""
    return int(conn.execute(sa.select(DB_NOW_MS)).scalar_one())


def find_app_by_key(conn: Connection, api_key: str) -> App | None:
    """The app that owns ``api_key``, if the key is neither revoked nor past its end on
    the database's clock, with its handler patterns and whether it is disabled."""
    row = conn.execute(
        sa.select(
            apps.c.id,
            apps.c.app_id,
            apps.c.name,
            apps.c.handler_patterns,
            apps.c.disabled_at,
            apps.c.callback_networks,
            *LIMIT_COLUMNS,
            (api_keys.c.expires_at - DB_NOW_MS).label("expires_in"),
            api_keys.c.key_id,
        )
        .select_from(api_keys.join(apps, api_keys.c.app_pk == apps.c.id))
        .where(
            api_keys.c.key_hash == hash_api_key(api_key),
            api_keys.c.revoked_at.is_(None),
            sa.or_(api_keys.c.expires_at.is_(None), api_keys.c.expires_at > DB_NOW_MS),
        )
    ).first()
    if row is None:
        return None
    return App(
        id=row.id,
        app_id=row.app_id,
        name=row.name,
        handlers=HandlerPatterns.from_stored(row.handler_patterns),
        disabled=row.disabled_at is not None,
        key_expires_in_ms=None if row.expires_in is None else int(row.expires_in),
        callback_networks=networks_from_stored(row.callback_networks),
        limits=AppLimits.from_row(row),
        actor=str(row.key_id),
    )


def set_handler_patterns(conn: Connection, app_id: str, patterns: HandlerPatterns) -> bool:
    """Let the app's jobs name the handlers ``patterns`` allow (``EVERY_HANDLER``: all,
    ``NO_HANDLER``: none); False if no such app."""
    result = conn.execute(
        apps.update().where(apps.c.app_id == app_id).values(handler_patterns=patterns.stored())
    )
    # SQLAlchemy's MySQL drivers count matched rows (CLIENT_FOUND_ROWS), so setting the
    # patterns an app already has counts too.
    return bool(result.rowcount)


def handler_patterns(conn: Connection, app_id: str) -> HandlerPatterns | None:
    """The handlers the app may name; None if no such app."""
    row = conn.execute(sa.select(apps.c.handler_patterns).where(apps.c.app_id == app_id)).first()
    return None if row is None else HandlerPatterns.from_stored(row.handler_patterns)


def live_job_handlers(conn: Connection, app_id: str) -> dict[str, int]:
    """How many of the app's live jobs (waiting, running or paused, not deleted) name
    each handler; empty if no such app."""
    query = (
        sa.select(jobs.c.handler, sa.func.count())
        .select_from(jobs.join(apps, jobs.c.app_pk == apps.c.id))
        .where(
            apps.c.app_id == app_id,
            jobs.c.status.in_([str(s) for s in ACTIVE]),
            jobs.c.deleted_at.is_(None),
        )
        .group_by(jobs.c.handler)
    )
    return {str(handler): int(count) for handler, count in conn.execute(query)}


def rotate_signing_secret(
    conn: Connection, app_id: str, now_ms: int, until_ms: int, force: bool = False
) -> str | None:
    """Give the app a new signing secret; callbacks are signed with the old one as well
    until ``until_ms``. Returns the new secret; None if no such app, or if an earlier
    rotation's overlap is still open at ``now_ms`` and ``force`` is not set (rotating
    then would drop the secret that overlap promised to keep)."""
    secret = new_signing_secret()
    until = apps.c.previous_secret_until
    closed = sa.or_(until.is_(None), until <= now_ms)
    result = conn.execute(
        apps.update()
        .where(apps.c.app_id == app_id, sa.true() if force else closed)
        # MySQL applies SET left to right: the old secret is copied before it changes.
        .ordered_values(
            (apps.c.previous_signing_secret, apps.c.signing_secret),
            (apps.c.previous_secret_until, until_ms),
            (apps.c.signing_secret, secret),
        )
    )
    return secret if result.rowcount else None


def previous_secret_until(conn: Connection, app_id: str) -> int | None:
    """Until when the app's previous signing secret signs too; None if no such app or
    it never rotated."""
    value = conn.execute(
        sa.select(apps.c.previous_secret_until).where(apps.c.app_id == app_id)
    ).scalar()
    return int(value) if value is not None else None


def signing_secrets(conn: Connection, app_pk: int, now_ms: int) -> list[str]:
    """The secrets to sign the app's callbacks with: the current one, then the previous
    one while its overlap lasts; empty if no such app."""
    row = conn.execute(
        sa.select(
            apps.c.signing_secret, apps.c.previous_signing_secret, apps.c.previous_secret_until
        ).where(apps.c.id == app_pk)
    ).first()
    if row is None:
        return []
    found = [str(row.signing_secret)]
    if row.previous_signing_secret and (row.previous_secret_until or 0) > now_ms:
        found.append(str(row.previous_signing_secret))
    return found
