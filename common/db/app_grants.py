"""What an operator grants an app besides its keys: the networks its callbacks may reach
and its limits (share weight, cap on runs at once, quotas).

Both live on the ``apps`` row (schema 0012). The API reads them with the app when it
authenticates a key (``find_app_by_key``), the notifier reads an app's networks before
it sends, the dispatcher its weight and cap (``app_limits``), workers the run-log
quotas (``run_log_quotas``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.callback_urls import IPNetwork, networks_from_stored, stored_networks
from common.db.job_control import ACTIVE
from common.db.records import AppLimits
from common.db.schema import apps, jobs

LIMIT_COLUMNS = (
    apps.c.weight,
    apps.c.max_running,
    apps.c.max_jobs,
    apps.c.min_cron_interval_seconds,
    apps.c.run_log_bytes_per_hour,
    apps.c.max_retries,
)


def set_callback_networks(
    conn: Connection, app_id: str, networks: Sequence[IPNetwork] | None
) -> bool:
    """Let the app's callbacks reach ``networks`` although they are not public (None:
    the cluster's default again); False if no such app."""
    result = conn.execute(
        apps.update()
        .where(apps.c.app_id == app_id)
        .values(callback_networks=stored_networks(networks))
    )
    return bool(result.rowcount)


def callback_networks(conn: Connection, app_pk: int) -> tuple[IPNetwork, ...] | None:
    """The networks the app's callbacks may reach; None for the cluster's default (and
    for an app that is gone: its callbacks get no more than the default)."""
    row = conn.execute(sa.select(apps.c.callback_networks).where(apps.c.id == app_pk)).first()
    return None if row is None else networks_from_stored(row.callback_networks)


def set_limits(conn: Connection, app_id: str, limits: AppLimits) -> bool:
    """Store the app's limits, every one of them; False if no such app."""
    result = conn.execute(apps.update().where(apps.c.app_id == app_id).values(**asdict(limits)))
    return bool(result.rowcount)


def app_limits(conn: Connection, app_pk: int) -> AppLimits | None:
    """The limits of the app whose primary key is ``app_pk``; None if no such app."""
    row = conn.execute(sa.select(*LIMIT_COLUMNS).where(apps.c.id == app_pk)).first()
    return None if row is None else AppLimits.from_row(row)


def all_app_limits(conn: Connection) -> dict[int, AppLimits]:
    """Every app's limits by its primary key, for a dispatcher sharing slots out."""
    rows = conn.execute(sa.select(apps.c.id, *LIMIT_COLUMNS))
    return {int(row.id): AppLimits.from_row(row) for row in rows}


def run_log_quotas(conn: Connection) -> dict[int, int]:
    """The run-log quota (bytes per hour) of every app that has one, by primary key."""
    column = apps.c.run_log_bytes_per_hour
    rows = conn.execute(sa.select(apps.c.id, column).where(column.is_not(None)))
    return {int(row.id): int(row.run_log_bytes_per_hour) for row in rows}


def stored_job_count(conn: Connection, app_pk: int) -> int:
    """How many jobs the app keeps stored against its ``max_jobs``: not ended (waiting,
    running or paused) and not deleted."""
    query = (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(
            jobs.c.app_pk == app_pk,
            jobs.c.status.in_([str(s) for s in ACTIVE]),
            jobs.c.deleted_at.is_(None),
        )
    )
    return int(conn.execute(query).scalar_one())
