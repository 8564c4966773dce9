"""``kairos callbacks``: the receiving hosts the notifiers report, dead callbacks with
their last error, and replaying them by delivery, by job, or every dead one, printing
how many moved."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from services.cli.jobs import _job_id, _limit
from services.cli.render import Column, make_console, one_line, print_json, print_table, when_text
from services.cli.types import Subcommands, cli_actor

if TYPE_CHECKING:
    from common.documents import JsonObject
    from common.notifier_standing import HostStanding
    from services.api.operator.callbacks import DeadLine, ReceivingHosts
    from services.api.operator.dead_letters import ReplayReport

ALL_DEAD_LIMIT = 100_000


def _dead_json(line: DeadLine) -> JsonObject:
    from common.timefmt import iso_ms

    delivery = line.delivery
    return {
        "deliveryId": delivery.delivery_id,
        "jobId": delivery.job_id,
        "executionId": delivery.execution_id,
        "appId": line.app.app_id if line.app else None,
        "appName": line.app.name if line.app else None,
        "url": delivery.url,
        "attempts": delivery.attempts,
        "deadReason": delivery.dead_reason,
        "lastStatusCode": delivery.last_status_code,
        "lastError": delivery.last_error,
        "deadAt": iso_ms(delivery.updated_at),
        # Whether it is an alert (no job, no app), not a callback.
        "alert": delivery.alert_rule_pk is not None,
    }


def _dead_row(line: DeadLine, now: int) -> list[str]:
    delivery = line.delivery
    return [
        delivery.delivery_id,
        str(delivery.job_id) if delivery.job_id is not None else "-",
        line.app.name if line.app else ("(alert)" if delivery.alert_rule_pk is not None else "?"),
        str(delivery.attempts),
        str(delivery.dead_reason or "-"),
        when_text(delivery.updated_at, now),
        one_line(delivery.last_error or str(delivery.last_status_code or ""), 80),
    ]


def cmd_callbacks_dead(args: argparse.Namespace) -> int:
    """Dead callbacks, most recently parked first, with their last error."""
    from common.config import ApiSettings
    from services.api.operator.callbacks import dead_callbacks
    from services.api.operator.jobs import operator_state

    with operator_state(ApiSettings()) as state:
        lines = dead_callbacks(state, args.app, args.limit)
        now = state.clock.now_ms()
    if args.output == "json":
        print_json({"deliveries": [_dead_json(line) for line in lines]})
        return 0
    rows = [_dead_row(line, now) for line in lines]
    columns = [
        Column("DELIVERY", keep=36),
        Column("JOB", "id"),
        Column("APP", "text", keep=5),
        Column("POSTS", "id"),
        Column("WHY", keep=9),
        Column("DEAD", keep=7),
        Column("LAST ERROR", "text", keep=10),
    ]
    print_table(columns, rows, "no dead callback", make_console())
    return 0


def _print_walk(report: ReplayReport) -> None:
    from common.topology import CALLBACKS_DEAD_QUEUE

    print(f"replayed {report.replayed} dead-lettered callbacks")
    if report.stale:
        print(f"dropped {report.stale} stale copies of callbacks replayed another way")
    if report.pruned:
        print(
            f"kairos: {report.pruned} messages in {CALLBACKS_DEAD_QUEUE} belong to deliveries "
            "retention deleted; they stay there (see the notifier's log for their ids)",
            file=sys.stderr,
        )
    if report.unreadable:
        print(
            f"kairos: {report.unreadable} messages in {CALLBACKS_DEAD_QUEUE} cannot be read "
            "as callbacks and stay there (inspect them in the management UI)",
            file=sys.stderr,
        )


def _host_json(host: HostStanding) -> JsonObject:
    return {
        "host": host.host,
        "notifiers": host.notifiers,
        "inFlight": host.in_flight,
        "waiting": host.waiting,
        "latencyMs": host.latency_ms,
        "limit": host.limit,
        "attempts": host.attempts,
        "failures": host.failures,
    }


def _hosts_json(found: ReceivingHosts) -> JsonObject:
    apps = []
    for app in found.apps:
        known = found.names.get(app.app_pk)
        apps.append(
            {
                "appId": known.app_id if known else None,
                "appName": known.name if known else None,
                "inFlight": app.in_flight,
                "waiting": app.waiting,
            }
        )
    hosts: list[JsonObject] = [_host_json(h) for h in found.hosts]
    return {"notifiers": found.notifiers, "hosts": hosts, "apps": apps}


def _host_row(host: HostStanding) -> list[str]:
    latency = f"{host.latency_ms} ms" if host.latency_ms is not None else "-"
    return [
        host.host,
        str(host.in_flight),
        str(host.waiting),
        latency,
        str(host.limit),
        str(host.attempts),
        str(host.failures),
        str(host.notifiers),
    ]


def cmd_callbacks_hosts(args: argparse.Namespace) -> int:
    """Receiving hosts as the notifiers report them: attempts going, callbacks waiting,
    recent latency and the adaptive limit; busiest first."""
    from common.config import ApiSettings
    from services.api.operator.callbacks import receiving_hosts
    from services.api.operator.jobs import operator_state

    with operator_state(ApiSettings()) as state:
        found = receiving_hosts(state)
    if args.output == "json":
        print_json(_hosts_json(found))
        return 0
    columns = [
        Column("HOST", "id"),
        Column("GOING", "num", keep=5),
        Column("WAITING", "num", keep=5),
        Column("LATENCY", "num", keep=4),
        Column("LIMIT", "num", keep=4),
        Column("POSTS", "num", keep=2),
        Column("FAILED", "num", keep=3),
        Column("NOTIFIERS", "num"),
    ]
    empty = (
        "no notifier reports a receiving host"
        if found.notifiers
        else "no notifier is reporting (none running, or none since Redis lost its data)"
    )
    print_table(columns, [_host_row(h) for h in found.hosts], empty, make_console())
    return 0


def cmd_callbacks_replay(args: argparse.Namespace) -> int:
    """Replay one delivery (DEAD or DELIVERED), a job's dead ones, or every dead one."""
    from common.config import ApiSettings
    from services.api.operator.callbacks import replay_all_dead, replay_delivery, replay_job
    from services.api.operator.jobs import operator_state

    with operator_state(ApiSettings()) as state:
        if args.all_dead:
            _print_walk(replay_all_dead(state, args.limit, cli_actor()))
            return 0
        if args.delivery is not None:
            moved = replay_delivery(state, args.delivery, cli_actor())
        else:
            moved = replay_job(state, args.job, cli_actor())
    print(f"replayed {moved} callbacks (sent again within seconds, on a fresh schedule)")
    if args.delivery is not None and not moved:
        print(
            f"kairos: delivery {args.delivery} is unknown, or still on its way (only a DEAD "
            "or DELIVERED one is replayed)",
            file=sys.stderr,
        )
        return 1
    return 0


def add_callbacks_parsers(sub: Subcommands) -> None:
    """``kairos callbacks hosts|dead|replay``."""
    callbacks = sub.add_parser(
        "callbacks", help="receiving hosts; dead callbacks; replay"
    ).add_subparsers(dest="callbacks_cmd", required=True)
    hosts = callbacks.add_parser(
        "hosts",
        help="receiving hosts: attempts going, callbacks waiting, recent latency, limit",
    )
    hosts.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="default table"
    )
    hosts.set_defaults(func=cmd_callbacks_hosts)
    dead = callbacks.add_parser("dead", help="dead callbacks with their last error")
    dead.add_argument("--app", help="an app id, or an app's name")
    dead.add_argument("--limit", type=_limit, default=100, help="default 100, at most 1000")
    dead.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="default table"
    )
    dead.set_defaults(func=cmd_callbacks_dead)
    replay = callbacks.add_parser(
        "replay", help="send callbacks again on a fresh schedule; prints how many moved"
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--delivery", help="one delivery (DEAD or DELIVERED) by its id")
    which.add_argument("--job", type=_job_id, help="every DEAD delivery of one job")
    which.add_argument(
        "--all-dead", action="store_true", help="every callback in the dead-letter queue"
    )
    replay.add_argument(
        "--limit", type=int, default=ALL_DEAD_LIMIT, help="with --all-dead: at most this many"
    )
    replay.set_defaults(func=cmd_callbacks_replay)
