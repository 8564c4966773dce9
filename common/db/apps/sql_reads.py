"""The SQL of the apps as operators list them, of what their jobs and runs amount to,
and of the audit row of a change to one (``AppReads`` on MySQL)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db import driver
from common.db.apps.records import (
    LAG_WINDOW_MS,
    App,
    AppActivity,
    AppRecord,
    activity_of,
    app_change,
)
from common.db.apps.sql_keys import LIMIT_COLUMNS
from common.db.audit import record_audit
from common.db.job_control import ACTIVE
from common.db.schema import apps, executions, jobs
from common.documents import JsonObject
from common.handler_patterns import HandlerPatterns
from common.operator_roles import EVERY_APP, AppScope
from common.states import ExecutionStatus

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

# The most runs whose start lag one read looks at.
LAG_SAMPLE = 20_000


class AppReadSql:
    """``AppReads`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ()
    _conn: Connection

    def all_apps(self) -> list[AppRecord]:
        """Every app (id, name, creation time, handler patterns, when it was disabled,
        its callback networks and limits), oldest first; no secrets."""
        query = sa.select(*APP_RECORD_COLUMNS).order_by(apps.c.id)
        return [AppRecord.from_row(row) for row in self._conn.execute(query)]

    def app_record(self, app_id: str) -> AppRecord | None:
        """One app as ``all_apps`` lists it; None if no such app."""
        query = sa.select(*APP_RECORD_COLUMNS).where(apps.c.app_id == app_id)
        row = self._conn.execute(query).first()
        return None if row is None else AppRecord.from_row(row)

    def apps_by_key(self, scope: AppScope = EVERY_APP) -> dict[int, App]:
        """Every app in ``scope`` by its primary key, by name, with its handler patterns
        and whether it is disabled."""
        rows = self._conn.execute(
            sa.select(
                apps.c.id, apps.c.app_id, apps.c.name, apps.c.handler_patterns, apps.c.disabled_at
            ).order_by(apps.c.name)
        )
        return {
            int(r.id): App(
                int(r.id),
                str(r.app_id),
                str(r.name),
                HandlerPatterns.from_stored(r.handler_patterns),
                disabled=r.disabled_at is not None,
            )
            for r in rows
            if scope.includes(int(r.id))
        }

    def live_job_handlers(self, app_id: str) -> dict[str, int]:
        """How many of the app's live jobs name each handler; empty if no such app."""
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
        return {str(handler): int(count) for handler, count in self._conn.execute(query)}

    def stored_job_count(self, app_pk: int) -> int:
        """How many jobs the app keeps stored: not ended and not deleted."""
        query = (
            sa.select(sa.func.count())
            .select_from(jobs)
            .where(
                jobs.c.app_pk == app_pk,
                jobs.c.status.in_([str(s) for s in ACTIVE]),
                jobs.c.deleted_at.is_(None),
            )
        )
        return int(self._conn.execute(query).scalar_one())

    def running_by_app(self) -> dict[int, int]:
        """How many runs each app has going (QUEUED: in a worker's queue or running)."""
        rows = self._conn.execute(
            sa.select(jobs.c.app_pk, sa.func.count())
            .select_from(executions.join(jobs, jobs.c.id == executions.c.job_id))
            .where(executions.c.status == ExecutionStatus.QUEUED)
            .group_by(jobs.c.app_pk)
        ).all()
        return {int(app): int(count) for app, count in rows}

    def _waiting_by_app(self, now_ms: int) -> dict[int, int]:
        """How many due runs each app has waiting (SCHEDULED, due by ``now_ms``)."""
        rows = driver.fetch(
            self._conn,
            "SELECT j.app_pk, COUNT(*) AS n FROM executions e JOIN jobs j ON j.id = e.job_id "
            "WHERE e.status = %s AND e.scheduled_at <= %s GROUP BY j.app_pk",
            (ExecutionStatus.SCHEDULED.value, now_ms),
        )
        return {int(r.app_pk): int(r.n) for r in rows}

    def app_activity(self, now_ms: int, app_id: str | None = None) -> list[AppActivity]:
        """Every app's standing (or ``app_id``'s alone, with its start lag), by app id."""
        query = sa.select(apps.c.id, apps.c.app_id, apps.c.name, apps.c.weight, apps.c.max_running)
        if app_id is not None:
            query = query.where(apps.c.app_id == app_id)
        found = self._conn.execute(query.order_by(apps.c.app_id)).all()
        waiting, running = self._waiting_by_app(now_ms), self.running_by_app()
        out = []
        for row in found:
            pk = int(row.id)
            lags = self._start_lags(pk, now_ms - LAG_WINDOW_MS) if app_id is not None else []
            cap = None if row.max_running is None else int(row.max_running)
            counts = (waiting.get(pk, 0), running.get(pk, 0))
            out.append(
                activity_of(
                    pk, str(row.app_id), str(row.name), (int(row.weight), cap), counts, lags
                )
            )
        return out

    def _start_lags(self, app_pk: int, since_ms: int) -> list[float]:
        """Start lags (seconds, sorted) of the app's first attempts triggered since then.

        Read from the app's jobs by the executions' (job, trigger time) key, so the read
        costs the app's recent runs, not the table.
        """
        rows = driver.fetch(
            self._conn,
            "SELECT e.started_at - e.trigger_time AS lag FROM jobs j JOIN executions e "
            "ON e.job_id = j.id AND e.trigger_time >= %s WHERE j.app_pk = %s AND e.attempt = 1 "
            "AND e.manual = 0 AND e.started_at IS NOT NULL LIMIT %s",
            (since_ms, app_pk, LAG_SAMPLE),
        )
        return sorted(max(0, int(r.lag)) / 1000 for r in rows)

    def audit_change(
        self,
        actor: str,
        action: str,
        app_id: str,
        before: AppRecord | None,
        now_ms: int,
        extra: JsonObject | None = None,
    ) -> None:
        """Write the row of ``action`` on app ``app_id`` in this transaction."""
        after = self.app_record(app_id)
        if after is not None:
            record_audit(self._conn, [app_change(actor, action, before, after, extra)], now_ms)
