"""``kairos audit``: the changes made through the OpenAPI, the console and the CLI."""

from __future__ import annotations

import argparse

from services.cli.types import Subcommands

_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def since_ms(text: str, now_ms: int) -> int:
    """``--since``: a time ago (``90s``, ``15m``, ``2h``, ``7d``) or an ISO 8601 instant
    (UTC without an offset) or epoch ms, as epoch ms."""
    from common.timefmt import parse_instant

    unit = _UNITS.get(text[-1:].lower())
    if unit is not None:
        try:
            return now_ms - int(float(text[:-1]) * unit)
        except ValueError:
            pass
    try:
        return parse_instant(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since {text!r}: give a time ago (15m, 2h, 7d) or an ISO 8601 instant"
        ) from None


def cmd_audit(args: argparse.Namespace) -> int:
    """Print the audit trail, newest first."""
    from common.clock import wall_ms
    from common.config import StoreSettings
    from common.db.engine import make_engine
    from common.timefmt import iso_ms
    from services.api.operator.audit_reads import read_audit
    from services.cli.render import Column, make_console, print_json, print_table

    since = None if args.since is None else since_ms(args.since, wall_ms())
    engine = make_engine(StoreSettings(), pool_size=1)
    try:
        found = read_audit(engine, args.app, args.actor, since, args.limit)
    finally:
        engine.dispose()
    if args.output == "json":
        print_json([r.as_dict() for r in found])
        return 0
    columns = [
        Column("AT"),
        Column("ACTOR", "id"),
        Column("ACTION"),
        Column("OBJECT", "id"),
        Column("APP"),
        Column("CHANGE", "text"),
    ]
    rows = [
        [
            str(iso_ms(r.at)),
            r.actor,
            r.action,
            f"{r.object_type}:{r.object_id}",
            r.app_id or "-",
            f"{r.before or '-'} -> {r.after or '-'}",
        ]
        for r in found
    ]
    print_table(columns, rows, "no change recorded", make_console())
    return 0


def add_audit_parser(sub: Subcommands) -> None:
    """``kairos audit [--app] [--actor] [--since] [--limit] [-o json]``."""
    audit = sub.add_parser(
        "audit", help="changes made through the OpenAPI, the console and the CLI, newest first"
    )
    audit.add_argument("--app", metavar="APP_ID", help="only changes to this app's objects")
    audit.add_argument(
        "--actor", help="only this actor's: an operator's name, cli:<user>, or an API key id"
    )
    audit.add_argument("--since", help="a time ago (15m, 2h, 7d) or an ISO 8601 instant")
    audit.add_argument("--limit", type=int, default=200, help="at most this many (200)")
    audit.add_argument("-o", "--output", choices=["table", "json"], default="table")
    audit.set_defaults(func=cmd_audit)
