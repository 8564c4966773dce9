"""The overview: runs finished and failed per minute, trigger lag p99, live workers,
dead callbacks, the apps' shares of the slots and queue depths, with small charts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response

from common.activity import MinuteActivity, merged_buckets, quantile, read_activity
from common.db.delivery_store import MySqlDeliveryStore
from common.documents import JsonObject
from common.errors import StoreUnavailableError
from common.metrics import LATENCY_BUCKETS
from common.operator_roles import EVERY_APP, AppScope
from common.states import WorkerState
from common.timefmt import iso_ms
from common.vhost import vhost_queues
from common.worker_views import worker_views
from services.api.console.charts import Bar, bar_chart, line_chart
from services.api.console.render import PageContext, page, redirect, span
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, console_state
from services.api.operator.queue_order import QueueRow, ordered_queues
from services.api.state import ApiState

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

CHART_MINUTES = 30
RECENT_MINUTES = 5


@dataclass(frozen=True)
class Queues:
    """The vhost's queues, or why they could not be read."""

    rows: list[dict[str, int | str]]
    error: str | None = None

    @property
    def ordered(self) -> list[QueueRow]:
        """The queues by meaning, the callback retry tiers folded into one row."""
        return ordered_queues(self.rows)

    @property
    def waiting(self) -> int:
        """Messages ready or unacked in every queue."""
        return sum(int(q["ready"]) + int(q["unacked"]) for q in self.rows)


def _queues(state: ApiState) -> Queues:
    try:
        return Queues(vhost_queues(state.settings))
    except StoreUnavailableError as e:
        return Queues([], str(e))


def _minute_label(minute: MinuteActivity) -> str:
    return (iso_ms(minute.minute_ms) or "")[11:16]


def _charts(minutes: list[MinuteActivity]) -> JsonObject:
    bars = [Bar(_minute_label(m), m.succeeded, m.failed) for m in minutes]
    lags = [(_minute_label(m), quantile(0.99, m.lag_buckets)) for m in minutes]
    finite = [(label, None if v is None or math.isinf(v) else v) for label, v in lags]
    return {
        "runs_chart": bar_chart(bars, "Runs finished per minute (failed on top)"),
        "lag_chart": line_chart(finite, "Trigger lag p99 per minute", lambda v: span(v * 1000)),
    }


def lag_text(seconds: float | None) -> str:
    """A p99 as the overview shows it: a dash with no dispatch, ``> 10 s`` past the last
    bucket."""
    if seconds is None:
        return "-"
    if math.isinf(seconds):
        return f"> {LATENCY_BUCKETS[-1]:g} s"
    return span(seconds * 1000)


def overview_context(state: ApiState, scope: AppScope = EVERY_APP) -> PageContext:
    """Everything the overview shows, read now: the cluster's runs, workers and queues,
    and the dead callbacks and app shares of the apps in ``scope``."""
    now = state.clock.now_ms()
    minutes = read_activity(state.redis, state.keys, now, CHART_MINUTES)
    recent = minutes[-RECENT_MINUTES:]  # the current minute, still filling, is the last
    with state.workers().reading() as store:
        workers = worker_views(store, now, state.settings.heartbeat_stale_ms)
    with state.engine.connect() as conn:
        dead = MySqlDeliveryStore(conn).count_dead(scope.app_pks)
    with state.apps().reading() as app_store:
        apps = [
            a
            for a in app_store.app_activity(now)
            if (a.waiting or a.running) and scope.includes(a.app_pk)
        ]
    present = [w for w in workers if w.state is not WorkerState.FORGOTTEN]
    return {
        "now": now,
        "recent_finished": sum(m.succeeded + m.failed for m in recent),
        "recent_failed": sum(m.failed for m in recent),
        "lag_text": lag_text(quantile(0.99, merged_buckets(recent))),
        "recent_minutes": RECENT_MINUTES,
        "live_workers": sum(1 for w in present if w.takes_work),
        "workers": len(present),
        "dead_callbacks": dead,
        "apps": sorted(apps, key=lambda a: (-a.waiting, -a.running, a.app_id)),
        "queues": _queues(state),
        "quiet": not any(m.finished or m.lag_buckets for m in minutes),
        "chart_minutes": CHART_MINUTES,
        **_charts(minutes),
    }


@router.get("")
def to_overview() -> Response:
    """``/console`` is the overview at ``/console/``."""
    return redirect("/console/")


@router.get("/")
def overview(request: Request, session: SessionDep) -> Response:
    """The overview page."""
    context = overview_context(console_state(request), session.operator.scope)
    return page(request, "overview.html", session=session, nav="overview", **context)
