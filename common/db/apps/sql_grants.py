"""The SQL of what an operator grants an app (``AppGrants`` on MySQL): handlers,
callback networks, limits, disabling; all on the ``apps`` row (schema 0012)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.callback_urls import IPNetwork, networks_from_stored, stored_networks
from common.db.apps.records import AppPolicy
from common.db.apps.sql_keys import LIMIT_COLUMNS
from common.db.records import AppLimits
from common.db.schema import apps
from common.handler_patterns import HandlerPatterns


class AppGrantSql:
    """``AppGrants`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ()
    _conn: Connection

    def set_disabled(self, app_id: str, disabled_at: int | None) -> bool:
        """Disable the app at ``disabled_at`` (None enables it); False if no such app."""
        result = self._conn.execute(
            apps.update().where(apps.c.app_id == app_id).values(disabled_at=disabled_at)
        )
        return bool(result.rowcount)

    def set_handler_patterns(self, app_id: str, patterns: HandlerPatterns) -> bool:
        """Let the app's jobs name the handlers ``patterns`` allow; False if no such app."""
        result = self._conn.execute(
            apps.update().where(apps.c.app_id == app_id).values(handler_patterns=patterns.stored())
        )
        # SQLAlchemy's MySQL drivers count matched rows (CLIENT_FOUND_ROWS), so setting the
        # patterns an app already has counts too.
        return bool(result.rowcount)

    def handler_patterns(self, app_id: str) -> HandlerPatterns | None:
        """The handlers the app may name; None if no such app."""
        row = self._conn.execute(
            sa.select(apps.c.handler_patterns).where(apps.c.app_id == app_id)
        ).first()
        return None if row is None else HandlerPatterns.from_stored(row.handler_patterns)

    def set_callback_networks(self, app_id: str, networks: Sequence[IPNetwork] | None) -> bool:
        """Let the app's callbacks reach ``networks``; False if no such app."""
        result = self._conn.execute(
            apps.update()
            .where(apps.c.app_id == app_id)
            .values(callback_networks=stored_networks(networks))
        )
        return bool(result.rowcount)

    def callback_networks(self, app_pk: int) -> tuple[IPNetwork, ...] | None:
        """The networks the app's callbacks may reach; None for the cluster's default
        (and for an app that is gone: its callbacks get no more than the default)."""
        row = self._conn.execute(
            sa.select(apps.c.callback_networks).where(apps.c.id == app_pk)
        ).first()
        return None if row is None else networks_from_stored(row.callback_networks)

    def set_limits(self, app_id: str, limits: AppLimits) -> bool:
        """Store the app's limits, every one of them; False if no such app."""
        result = self._conn.execute(
            apps.update().where(apps.c.app_id == app_id).values(**asdict(limits))
        )
        return bool(result.rowcount)

    def app_limits(self, app_pk: int) -> AppLimits | None:
        """The limits of the app whose primary key is ``app_pk``; None if no such app."""
        row = self._conn.execute(sa.select(*LIMIT_COLUMNS).where(apps.c.id == app_pk)).first()
        return None if row is None else AppLimits.from_row(row)

    def run_log_quotas(self) -> dict[int, int]:
        """The run-log quota (bytes per hour) of every app that has one, by primary key."""
        column = apps.c.run_log_bytes_per_hour
        rows = self._conn.execute(sa.select(apps.c.id, column).where(column.is_not(None)))
        return {int(row.id): int(row.run_log_bytes_per_hour) for row in rows}

    def app_policies(self) -> dict[int, AppPolicy]:
        """Every app's policy, by primary key."""
        rows = self._conn.execute(
            sa.select(
                apps.c.id,
                apps.c.app_id,
                apps.c.weight,
                apps.c.max_running,
                apps.c.disabled_at,
                apps.c.handler_patterns,
                apps.c.max_retries,
            )
        ).all()
        return {
            int(row.id): AppPolicy(
                app_id=str(row.app_id),
                weight=max(1, int(row.weight)),
                max_running=None if row.max_running is None else int(row.max_running),
                disabled=row.disabled_at is not None,
                handlers=HandlerPatterns.from_stored(row.handler_patterns),
                max_retries=int(row.max_retries),
            )
            for row in rows
        }
