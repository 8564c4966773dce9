"""``kairos stats --app``: each app's standing in the fair share (runs waiting for a
slot, runs going, weight and cap), or one app's with its runs' start lag."""

from __future__ import annotations

import argparse
import sys

from common.db.apps import LAG_WINDOW_MS, QUANTILES, AppActivity
from common.documents import JsonObject
from services.cli.render import Column, make_console, print_facts, print_json, print_table

# ``--app`` given with no app id: every app.
EVERY_APP = "*"


def cmd_stats_apps(args: argparse.Namespace) -> int:
    """Print every app's standing, or one app's (``args.app``) with its start lag."""
    import redis

    from common.clock import ClusterClock
    from common.config import ApiSettings
    from common.db.apps import MySqlAppTransactions
    from common.db.engine import make_engine

    settings = ApiSettings()
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=10)
    engine = make_engine(settings, pool_size=1)
    one = None if args.app == EVERY_APP else str(args.app)
    try:
        with MySqlAppTransactions(engine).reading() as apps:
            found = apps.app_activity(ClusterClock(client).now_ms(), one)
    finally:
        engine.dispose()
        client.close()
    if one is not None and not found:
        print(f"kairos: no app {one!r} (kairos app list shows them)", file=sys.stderr)
        return 1
    if args.output == "json":
        print_json({"apps": [_app_json(a) for a in found]})
    elif one is not None:
        print_facts(_app_facts(found[0]))
    else:
        _print_apps(found)
    return 0


def _cap(app: AppActivity) -> str:
    return "none" if app.max_running is None else str(app.max_running)


def _print_apps(found: list[AppActivity]) -> None:
    columns = [
        Column("APP", "id"),
        Column("NAME", "text"),
        Column("WEIGHT", "num"),
        Column("CAP", "num"),
        Column("WAITING", "num"),
        Column("GOING", "num"),
    ]
    rows = [
        [a.app_id, a.name, str(a.weight), _cap(a), str(a.waiting), str(a.running)] for a in found
    ]
    print_table(columns, rows, "no app", make_console())


def _lag_text(app: AppActivity) -> str:
    if not app.start_lag:
        return "no run started"
    parts = [f"p{round(q * 100):d} {app.start_lag[q]:.3f}s" for q in QUANTILES]
    return ", ".join([*parts, f"max {app.max_start_lag:.3f}s"])


def _app_facts(app: AppActivity) -> list[tuple[str, str]]:
    return [
        ("app", f"{app.app_id} ({app.name})"),
        ("weight", str(app.weight)),
        ("cap (runs at once)", _cap(app)),
        ("waiting for a slot", str(app.waiting)),
        ("going", str(app.running)),
        (
            f"start lag, last {LAG_WINDOW_MS // 60_000} min",
            f"{_lag_text(app)} ({app.started} first attempts)",
        ),
    ]


def _app_json(app: AppActivity) -> JsonObject:
    return {
        "appId": app.app_id,
        "name": app.name,
        "weight": app.weight,
        "maxRunning": app.max_running,
        "waiting": app.waiting,
        "going": app.running,
        "started": app.started,
        "startLagSeconds": {f"p{round(q * 100):d}": v for q, v in app.start_lag.items()},
        "maxStartLagSeconds": app.max_start_lag,
    }
