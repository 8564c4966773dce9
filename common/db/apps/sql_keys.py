"""The SQL of an app's creation, API keys and signing secrets (``AppKeys`` on MySQL)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.callback_urls import networks_from_stored
from common.db.apps.records import (
    ApiKeyRecord,
    App,
    AppCredentials,
    NewApiKey,
    hash_api_key,
    new_api_key,
    new_app_id,
    new_key_id,
    new_signing_secret,
)
from common.db.records import AppLimits
from common.db.schema import api_keys, apps
from common.handler_patterns import HandlerPatterns

LIMIT_COLUMNS = (
    apps.c.weight,
    apps.c.max_running,
    apps.c.max_jobs,
    apps.c.min_cron_interval_seconds,
    apps.c.run_log_bytes_per_hour,
    apps.c.max_retries,
)

# The database's clock in epoch ms: keys end by it, so authentication needs only MySQL.
DB_NOW_MS = sa.cast(sa.func.unix_timestamp(sa.func.now(3)) * 1000, sa.BigInteger)


class AppKeySql:
    """``AppKeys`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ()
    _conn: Connection

    def _add_key(self, app_pk: int, api_key: str, now_ms: int) -> str:
        key_id = new_key_id()
        self._conn.execute(
            api_keys.insert().values(
                key_id=key_id, app_pk=app_pk, key_hash=hash_api_key(api_key), created_at=now_ms
            )
        )
        return key_id

    def create_app(self, name: str, now_ms: int, handlers: HandlerPatterns) -> AppCredentials:
        """Create an app with a fresh API key and signing secret (see ``AppKeys``)."""
        app_id = new_app_id()
        api_key = new_api_key()
        signing_secret = new_signing_secret()
        result = self._conn.execute(
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
        key_id = self._add_key(int(key[0]), api_key, now_ms)
        return AppCredentials(app_id, api_key, signing_secret, key_id)

    def _app_pk(self, app_id: str) -> int | None:
        value = self._conn.execute(sa.select(apps.c.id).where(apps.c.app_id == app_id)).scalar()
        return int(value) if value is not None else None

    def rotate_api_key(self, app_id: str, now_ms: int, until_ms: int) -> NewApiKey | None:
        """Give the app a new API key; its other keys end by ``until_ms`` at the latest."""
        app_pk = self._app_pk(app_id)
        if app_pk is None:
            return None
        api_key = new_api_key()
        live = sa.and_(
            api_keys.c.app_pk == app_pk,
            api_keys.c.revoked_at.is_(None),
            sa.or_(api_keys.c.expires_at.is_(None), api_keys.c.expires_at > until_ms),
        )
        self._conn.execute(api_keys.update().where(live).values(expires_at=until_ms))
        key_id = self._add_key(app_pk, api_key, now_ms)
        self._conn.execute(
            apps.update().where(apps.c.id == app_pk).values(api_key_hash=hash_api_key(api_key))
        )
        return NewApiKey(key_id, api_key)

    def revoke_api_key(self, app_id: str, key_id: str, now_ms: int) -> bool:
        """Stop one of the app's keys; False if the app has no such key."""
        app_pk = self._app_pk(app_id)
        if app_pk is None:
            return False
        found = self._conn.execute(
            sa.select(api_keys.c.revoked_at).where(
                api_keys.c.app_pk == app_pk, api_keys.c.key_id == key_id
            )
        ).first()
        if found is None:
            return False
        if found.revoked_at is None:
            self._conn.execute(
                api_keys.update()
                .where(api_keys.c.app_pk == app_pk, api_keys.c.key_id == key_id)
                .values(revoked_at=now_ms)
            )
        return True

    def app_keys(self, app_id: str) -> list[ApiKeyRecord] | None:
        """The app's API keys, oldest first; None if no such app."""
        app_pk = self._app_pk(app_id)
        if app_pk is None:
            return None
        columns = (api_keys.c.key_id, api_keys.c.created_at, api_keys.c.expires_at)
        query = sa.select(*columns, api_keys.c.revoked_at).where(api_keys.c.app_pk == app_pk)
        rows = self._conn.execute(query.order_by(api_keys.c.id))
        return [ApiKeyRecord.from_row(row) for row in rows]

    def database_now_ms(self) -> int:
        """The database's time in epoch ms, the clock API keys end by."""
        return int(self._conn.execute(sa.select(DB_NOW_MS)).scalar_one())

    def find_app_by_key(self, api_key: str) -> App | None:
        """The app that owns ``api_key`` while the key works on the database's clock."""
        row = self._conn.execute(
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

    def rotate_signing_secret(
        self, app_id: str, now_ms: int, until_ms: int, force: bool = False
    ) -> str | None:
        """Give the app a new signing secret, the old one kept until ``until_ms``; None
        if no such app or an earlier overlap is open and ``force`` is not set."""
        secret = new_signing_secret()
        until = apps.c.previous_secret_until
        closed = sa.or_(until.is_(None), until <= now_ms)
        result = self._conn.execute(
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

    def previous_secret_until(self, app_id: str) -> int | None:
        """Until when the app's previous signing secret signs too; None if no such app
        or it never rotated."""
        value = self._conn.execute(
            sa.select(apps.c.previous_secret_until).where(apps.c.app_id == app_id)
        ).scalar()
        return int(value) if value is not None else None

    def signing_secrets(self, app_pk: int, now_ms: int) -> list[str]:
        """The current secret, then the previous one while its overlap lasts."""
        row = self._conn.execute(
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
