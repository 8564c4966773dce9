"""``kairos workers`` and ``kairos stats``: the workers with their load, and the
cluster's rates, lag and queues, read as the console reads them."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from services.cli.app_share import EVERY_APP, cmd_stats_apps
from services.cli.render import (
    Column,
    make_console,
    print_facts,
    print_json,
    print_table,
    seconds_text,
)
from services.cli.types import Subcommands, cli_actor, whole_number

if TYPE_CHECKING:
    from common.config import ApiSettings
    from common.documents import JsonObject
    from common.worker_views import WorkerView
    from services.api.operator.cluster_stats import ClusterStats

QueueCounts = dict[str, int | str]


def _queues_by_worker(settings: ApiSettings) -> tuple[dict[str, QueueCounts], str | None]:
    from common.errors import StoreUnavailableError
    from common.vhost import vhost_queues

    try:
        return {str(q["name"]): q for q in vhost_queues(settings)}, None
    except StoreUnavailableError as e:
        return {}, str(e)


def _worker_json(
    w: WorkerView, drain: bool, queue: QueueCounts | None, drained: bool = False
) -> JsonObject:
    parts = w.score
    return {
        "workerId": w.worker_id,
        "hostname": w.hostname,
        "pid": w.pid,
        "state": w.state.value,
        "stale": w.stale,
        "heartbeatAgeSeconds": round(w.age_ms / 1000, 3),
        "capacity": w.capacity,
        "active": w.active,
        "overrun": w.overrun,
        "queued": w.queued,
        "cpuIdle": w.cpu_idle,
        "avgMs": w.avg_ms,
        "score": round(parts.total, 3),
        "scoreParts": {"runs": parts.runs, "avgRun": parts.avg_run, "cpu": parts.cpu},
        "drainRequested": drain,
        "drained": drained,
        "queue": None if queue is None else {k: v for k, v in queue.items() if k != "name"},
        "handlers": list(w.handlers),
    }


def _worker_row(
    w: WorkerView, drain: bool, queue: QueueCounts | None, drained: bool = False
) -> list[str]:
    state = "STALE" if w.stale else w.state.value
    if drain:
        state += " (drain asked)"
    if drained:
        state += " (drained)"
    return [
        w.worker_id,
        state,
        seconds_text(w.age_ms / 1000),
        str(w.capacity),
        str(w.active),
        str(w.overrun),
        str(w.queued),
        "-" if queue is None else str(queue["ready"]),
        "-" if queue is None else str(queue["consumers"]),
        str(w.cpu_idle),
        str(w.avg_ms),
        f"{w.score.total:.2f}",
        ",".join(w.handlers),
    ]


WORKER_COLUMNS = (
    Column("WORKER", "id"),
    Column("STATE", keep=9),
    Column("AGE", "num", keep=8),
    Column("CAP", "num", keep=6),
    Column("ACTIVE", "num", keep=7),
    Column("OVERRUN", "num", keep=3),
    Column("QUEUED", "num", keep=5),
    Column("READY", "num", keep=2),
    Column("CONSUMERS", "num", keep=2),
    Column("IDLE%", "num", keep=2),
    Column("AVG_MS", "num", keep=2),
    Column("SCORE", "num", keep=6),
    Column("HANDLERS", "text", keep=4),
)


def cmd_workers(args: argparse.Namespace) -> int:
    """Workers with their state, heartbeat age by the cluster clock, load and score."""
    from common.config import ApiSettings
    from common.topology import worker_queue
    from common.worker_views import worker_views
    from services.api.operator.jobs import operator_state

    settings = ApiSettings()
    with operator_state(settings) as state:
        now = state.clock.now_ms()
        with state.workers().reading() as store:
            workers = worker_views(store, now, settings.heartbeat_stale_ms)
        ids = [w.worker_id for w in workers]
        marks = state.worker_marks()
        drains = marks.stops_requested(ids)
        standing = marks.drained(ids)
    queues, queue_error = _queues_by_worker(settings)
    if queue_error is not None:
        print(f"kairos: queue figures left out: {queue_error}", file=sys.stderr)
    found = [
        (
            w,
            w.worker_id in drains,
            queues.get(worker_queue(w.worker_id)),
            w.worker_id in standing,
        )
        for w in workers
    ]
    if args.output == "json":
        print_json({"workers": [_worker_json(*item) for item in found]})
        return 0
    rows = [_worker_row(*item) for item in found]
    print_table(WORKER_COLUMNS, rows, "no worker has sent a heartbeat yet")
    return 0


def cmd_workers_drain(args: argparse.Namespace) -> int:
    """Drain a worker until undrained: routed nothing new, its unstarted work moved to
    other workers, its runs finished; it stays up and may then be stopped."""
    from common.config import ApiSettings
    from services.api.operator.jobs import operator_state
    from services.api.operator.worker_control import set_drained

    settings = ApiSettings()
    with operator_state(settings) as state:
        set_drained(state, args.worker_id, settings.heartbeat_stale_ms, cli_actor())
    print(
        f"worker {args.worker_id} drains at its next heartbeat: it takes no new work, its "
        "unstarted work moves to other workers, its runs finish; then it may be stopped "
        f"(`kairos workers undrain {args.worker_id}` to take work again)"
    )
    return 0


def cmd_workers_undrain(args: argparse.Namespace) -> int:
    """Lift a drain: the worker takes work again at its next heartbeat."""
    from common.config import ApiSettings
    from services.api.operator.jobs import operator_state
    from services.api.operator.worker_control import clear_drained

    with operator_state(ApiSettings()) as state:
        lifted = clear_drained(state, args.worker_id, cli_actor())
    if not lifted:
        print(f"kairos: worker {args.worker_id!r} is not drained", file=sys.stderr)
        return 1
    print(f"worker {args.worker_id} takes work again at its next heartbeat")
    return 0


def _lag_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if math.isinf(seconds):
        return "> 10s"
    return seconds_text(seconds)


def _stats_json(stats: ClusterStats) -> JsonObject:
    def lag(value: float | None) -> float | str | None:
        return "+Inf" if value is not None and math.isinf(value) else value

    return {
        "windowSeconds": round(stats.seconds, 3),
        "finished": stats.finished,
        "succeeded": stats.succeeded,
        "failed": stats.failed,
        "finishedPerSecond": round(stats.per_second(stats.succeeded + stats.failed), 3),
        "failedPerSecond": round(stats.per_second(stats.failed), 3),
        "triggerLagSeconds": {f"p{round(q * 100):d}": lag(v) for q, v in stats.lag.items()},
        "workers": {
            "live": stats.workers_live,
            "stale": stats.workers_stale,
            "known": stats.workers_known,
        },
        "deadCallbacks": stats.dead_callbacks,
        "queues": stats.queues,
        "queueError": stats.queue_error,
    }


def _stats_facts(stats: ClusterStats) -> list[tuple[str, str]]:
    done = stats.succeeded + stats.failed
    by_status = ", ".join(f"{s} {n}" for s, n in stats.finished.items()) or "none"
    lags = ", ".join(f"p{round(q * 100):d} {_lag_text(v)}" for q, v in stats.lag.items())
    return [
        ("window", f"last {stats.minutes} min ({seconds_text(stats.seconds)}, this minute so far)"),
        ("finished", f"{done} ({stats.per_second(done):.2f}/s): {by_status}"),
        ("failed", f"{stats.failed} ({stats.per_second(stats.failed):.2f}/s)"),
        ("trigger lag", lags),
        (
            "workers",
            f"{stats.workers_live} live, {stats.workers_stale} stale, {stats.workers_known} known",
        ),
        ("dead callbacks", str(stats.dead_callbacks)),
    ]


def cmd_stats(args: argparse.Namespace) -> int:
    """Rates, lag percentiles, workers, dead callbacks and queue depths (or, with
    ``--app``, the apps' shares)."""
    if args.app is not None:
        return cmd_stats_apps(args)
    import redis

    from common.config import ApiSettings
    from common.db.engine import make_engine
    from common.db.workers import MySqlWorkerTransactions
    from services.api.operator.cluster_stats import read_cluster_stats

    settings = ApiSettings()
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=10)
    engine = make_engine(settings, pool_size=1)
    try:
        workers = MySqlWorkerTransactions(engine)
        stale_ms = settings.heartbeat_stale_ms
        stats = read_cluster_stats(settings, engine, workers, client, stale_ms, args.minutes)
    finally:
        engine.dispose()
        client.close()
    if stats.queue_error is not None:
        print(f"kairos: queue depths left out: {stats.queue_error}", file=sys.stderr)
    if args.output == "json":
        print_json(_stats_json(stats))
        return 0
    console = make_console()
    print_facts(_stats_facts(stats), console)
    console.print("", markup=False)
    rows = _queue_rows(stats.queues, args.tiers)
    columns = [
        Column("QUEUE", "id"),
        Column("READY", "num"),
        Column("UNACKED", "num"),
        Column("CONSUMERS", "num"),
    ]
    print_table(columns, rows, "queues: unknown" if stats.queue_error else "no queue", console)
    return 0


def _queue_rows(queues: list[dict[str, int | str]], tiers: bool) -> list[list[str]]:
    """The queues by meaning (``services.api.operator.queue_order``): the retry tiers in one row, or
    with ``tiers`` each under it, by delay."""
    from services.api.operator.queue_order import QueueRow, ordered_queues

    def cells(row: QueueRow, name: str) -> list[str]:
        return [name, str(row.ready), str(row.unacked), str(row.consumers)]

    rows = []
    for row in ordered_queues(queues):
        shown = f"{row.name} ({len(row.tiers)} tiers)" if row.tiers else row.name
        rows.append(cells(row, shown))
        if tiers:
            rows.extend(cells(tier, f"  {tier.name}") for tier in row.tiers)
    return rows


# 1 to 120 minutes: the activity kept.
_minutes = whole_number(1, 120)


def add_cluster_parsers(sub: Subcommands) -> None:
    """``kairos workers`` and ``kairos stats``."""
    workers = sub.add_parser(
        "workers", help="workers: state, heartbeat age (cluster clock), load and score"
    )
    workers.add_argument("-o", "--output", choices=["table", "json"], default="table")
    workers.set_defaults(func=cmd_workers)
    actions = workers.add_subparsers(dest="workers_cmd", required=False)
    drain = actions.add_parser(
        "drain",
        help="route a worker nothing new, move its unstarted work, let its runs finish",
    )
    drain.add_argument("worker_id")
    drain.set_defaults(func=cmd_workers_drain)
    undrain = actions.add_parser("undrain", help="let a drained worker take work again")
    undrain.add_argument("worker_id")
    undrain.set_defaults(func=cmd_workers_undrain)
    stats = sub.add_parser(
        "stats", help="runs finished and failed, rates, trigger lag percentiles, queue depths"
    )
    stats.add_argument("--minutes", type=_minutes, default=5, help="the span, 1 to 120 (default 5)")
    stats.add_argument(
        "--tiers",
        action="store_true",
        help="list each callback retry tier under their row (by delay)",
    )
    stats.add_argument("-o", "--output", choices=["table", "json"], default="table")
    stats.add_argument(
        "--app",
        nargs="?",
        const=EVERY_APP,
        metavar="APP_ID",
        help="each app's share: weight, cap, runs waiting for a slot and going; with an "
        "app id, that app's, with its runs' start lag",
    )
    stats.set_defaults(func=cmd_stats)
