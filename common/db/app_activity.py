"""Each app's standing in the fair share, read from MySQL: runs waiting for a slot, runs
going, its weight and cap, and (for one app) how long its runs waited to start.

What ``kairos stats --app``, the console's overview and the leader's per-app gauges show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db import driver
from common.db.app_policies import running_by_app
from common.db.schema import apps
from common.states import ExecutionStatus

# How far back the start lag of an app's runs is read.
LAG_WINDOW_MS = 600_000
# The most runs whose start lag one read looks at.
LAG_SAMPLE = 20_000
QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class AppActivity:
    """One app's standing: ``waiting`` due runs with no slot yet, ``running`` runs going
    (in a worker's queue or running), and, when read for that app alone, the start lag
    of its first attempts started in the last ``LAG_WINDOW_MS`` (seconds by quantile,
    and how many started)."""

    app_pk: int
    app_id: str
    name: str
    weight: int
    max_running: int | None
    waiting: int
    running: int
    started: int = 0
    start_lag: dict[float, float] = field(default_factory=dict)
    max_start_lag: float | None = None


def waiting_by_app(conn: Connection, now_ms: int) -> dict[int, int]:
    """How many due runs each app has waiting (SCHEDULED, due by ``now_ms``)."""
    rows = driver.fetch(
        conn,
        "SELECT j.app_pk, COUNT(*) AS n FROM executions e JOIN jobs j ON j.id = e.job_id "
        "WHERE e.status = %s AND e.scheduled_at <= %s GROUP BY j.app_pk",
        (ExecutionStatus.SCHEDULED.value, now_ms),
    )
    return {int(r.app_pk): int(r.n) for r in rows}


def app_activity(conn: Connection, now_ms: int, app_id: str | None = None) -> list[AppActivity]:
    """Every app's standing (or ``app_id``'s alone, with its start lag), by app id."""
    query = sa.select(apps.c.id, apps.c.app_id, apps.c.name, apps.c.weight, apps.c.max_running)
    if app_id is not None:
        query = query.where(apps.c.app_id == app_id)
    found = conn.execute(query.order_by(apps.c.app_id)).all()
    waiting, running = waiting_by_app(conn, now_ms), running_by_app(conn)
    out = []
    for row in found:
        pk = int(row.id)
        lags = _start_lags(conn, pk, now_ms - LAG_WINDOW_MS) if app_id is not None else []
        out.append(
            AppActivity(
                pk,
                str(row.app_id),
                str(row.name),
                int(row.weight),
                None if row.max_running is None else int(row.max_running),
                waiting.get(pk, 0),
                running.get(pk, 0),
                len(lags),
                {q: _quantile(lags, q) for q in QUANTILES} if lags else {},
                lags[-1] if lags else None,
            )
        )
    return out


def _start_lags(conn: Connection, app_pk: int, since_ms: int) -> list[float]:
    """Start lags (seconds, sorted) of the app's first attempts triggered since then.

    Read from the app's jobs by the executions' (job, trigger time) key, so the read
    costs the app's recent runs, not the table.
    """
    rows = driver.fetch(
        conn,
        "SELECT e.started_at - e.trigger_time AS lag FROM jobs j JOIN executions e "
        "ON e.job_id = j.id AND e.trigger_time >= %s WHERE j.app_pk = %s AND e.attempt = 1 "
        "AND e.manual = 0 AND e.started_at IS NOT NULL LIMIT %s",
        (since_ms, app_pk, LAG_SAMPLE),
    )
    return sorted(max(0, int(r.lag)) / 1000 for r in rows)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
