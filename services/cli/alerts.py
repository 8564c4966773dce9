"""The ``kairos alerts`` commands: an admin's alert rules (add, list, remove), each
change written to the audit trail."""

from __future__ import annotations

import argparse
import sys

from services.cli.types import Subcommands, cli_actor, whole_number

KINDS_HELP = (
    "comma-separated: FAILED, LOST, TIMED_OUT (a run's last attempt ended so), "
    "DEAD_CALLBACK (a callback went DEAD), WORKER_GONE (a worker presumed dead)"
)


def cmd_alerts_add(args: argparse.Namespace) -> int:
    """Add an alert rule and print its signing secret once."""
    from common.alerts.kinds import parse_kinds
    from common.alerts.rules import NewAlertRule, add_rule
    from common.callback_urls import CallbackUrlPolicy
    from common.clock import wall_ms
    from common.config import CallbackUrlSettings, StoreSettings
    from common.db.engine import make_engine
    from services.cli.render import print_json

    asked = NewAlertRule(args.webhook, parse_kinds(args.on), args.app, args.streak, args.every)
    urls = CallbackUrlSettings()
    policy = CallbackUrlPolicy.from_settings(
        urls.callback_allowed_networks, urls.callback_https_only
    )
    engine = make_engine(StoreSettings(), pool_size=1)
    try:
        with engine.begin() as conn:
            rule, secret = add_rule(conn, asked, cli_actor(), wall_ms(), policy)
    finally:
        engine.dispose()
    if args.output == "json":
        print_json({**rule.as_dict(), "signingSecret": secret})
    else:
        print(f"alert rule {rule.rule_id}: {rule.as_dict()['on']} -> {rule.url}")
        print(f"signing secret: {secret}")
    print(
        "kairos: the receiver verifies each alert with this secret (Standard Webhooks "
        "signature); it is shown only now",
        file=sys.stderr,
    )
    return 0


def cmd_alerts_list(args: argparse.Namespace) -> int:
    """List alert rules (no secrets)."""
    from common.alerts.rules import read_rules
    from common.config import StoreSettings
    from common.db.engine import make_engine
    from common.timefmt import iso_ms
    from services.cli.render import Column, make_console, print_json, print_table

    engine = make_engine(StoreSettings(), pool_size=1)
    try:
        with engine.connect() as conn:
            rules = read_rules(conn)
    finally:
        engine.dispose()
    if args.output == "json":
        print_json([r.as_dict() for r in rules])
        return 0
    columns = [
        Column("RULE", "id"),
        Column("APP", "id"),
        Column("ON", "text"),
        Column("STREAK", "num"),
        Column("EVERY", "num"),
        Column("WEBHOOK", "text"),
        Column("CREATED"),
    ]
    rows = [
        [
            r.rule_id,
            r.app_id or "(every app)",
            ",".join(k.value for k in r.kinds),
            str(r.streak),
            f"{r.every_seconds}s",
            r.url,
            str(iso_ms(r.created_at)),
        ]
        for r in rules
    ]
    empty = "no alert rule yet: `kairos alerts add --webhook URL --on FAILED` makes one"
    print_table(columns, rows, empty, make_console())
    return 0


def cmd_alerts_remove(args: argparse.Namespace) -> int:
    """Remove an alert rule; its alerts not yet delivered go with it."""
    from common.alerts.kinds import AlertRuleInvalid
    from common.alerts.rules import remove_rule
    from common.clock import wall_ms
    from common.config import StoreSettings
    from common.db.engine import make_engine
    from services.cli.render import print_json

    engine = make_engine(StoreSettings(), pool_size=1)
    try:
        with engine.begin() as conn:
            removed = remove_rule(conn, args.rule_id, cli_actor(), wall_ms())
    finally:
        engine.dispose()
    if removed is None:
        raise AlertRuleInvalid(f"no alert rule {args.rule_id}: see kairos alerts list")
    if args.output == "json":
        print_json({**removed.as_dict(), "removed": True})
    else:
        print(f"alert rule {removed.rule_id}: removed")
    return 0


def add_alerts_parsers(sub: Subcommands) -> None:
    """``kairos alerts add|list|remove``."""
    alerts = sub.add_parser(
        "alerts", help="alert rules: webhooks told of failed runs, dead callbacks, dead workers"
    ).add_subparsers(dest="alerts_cmd", required=True)
    add = alerts.add_parser("add", help="add a rule; prints its signing secret once")
    add.add_argument("--webhook", required=True, metavar="URL", help="where alerts are POSTed")
    add.add_argument("--on", required=True, metavar="KINDS", help=KINDS_HELP)
    add.add_argument("--app", metavar="APP_ID", help="only this app's runs and callbacks")
    add.add_argument(
        "--streak",
        type=whole_number(1, 10_000),
        default=1,
        metavar="N",
        help="fire on a job's runs only once N in a row failed (a success starts again); "
        "default 1: every failure",
    )
    add.add_argument(
        "--every",
        type=whole_number(1, 7 * 86_400),
        default=600,
        metavar="SECONDS",
        help="at most one alert per kind and job (or worker) this often; the rest are "
        "counted and told in the next alert or a summary (default 600)",
    )
    add.add_argument("-o", "--output", choices=["table", "json"], default="table")
    add.set_defaults(func=cmd_alerts_add)
    listing = alerts.add_parser("list", help="list alert rules (no secrets)")
    listing.add_argument("-o", "--output", choices=["table", "json"], default="table")
    listing.set_defaults(func=cmd_alerts_list)
    remove = alerts.add_parser("remove", help="remove an alert rule")
    remove.add_argument("rule_id", metavar="RULE_ID")
    remove.add_argument("-o", "--output", choices=["table", "json"], default="table")
    remove.set_defaults(func=cmd_alerts_remove)
