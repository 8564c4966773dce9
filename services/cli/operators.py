"""The ``kairos operator`` commands: people who may sign in to the web console, their
role (viewer, operator, admin) and the apps they are limited to."""

from __future__ import annotations

import argparse
import json
import sys

from services.cli.types import Subcommands, cli_actor

ROLES = ("viewer", "operator", "admin")
ROLE_HELP = (
    "viewer: reads every page; operator: also pauses, resumes, triggers, backfills and "
    "cancels jobs, fails and requeues executions, drains workers and replays dead "
    "callbacks; admin: also manages apps, keys, operators, limits and alerts"
)


def cmd_operator_create(args: argparse.Namespace) -> int:
    """Create a console operator and print its token once."""
    from common.config import StoreSettings
    from common.operator_roles import Role
    from services.api.operator.operator_accounts import create_operator_token

    token = create_operator_token(
        StoreSettings(), args.name, Role(args.role), args.app or (), actor=cli_actor()
    )
    print(
        json.dumps(
            {"operator": args.name, "role": args.role, "apps": args.app or None, "token": token}
        )
    )
    print(
        "kairos: sign in to the console (/console on the API) with this token; it is "
        "shown only now",
        file=sys.stderr,
    )
    return 0


def cmd_operator_list(args: argparse.Namespace) -> int:
    """List console operators with their role and apps."""
    from common.config import StoreSettings
    from common.timefmt import iso_ms
    from services.api.operator.operator_accounts import operator_records
    from services.cli.render import Column, make_console, print_json, print_table

    listed = operator_records(StoreSettings())
    if args.output == "json":
        print_json([o.as_dict() for o in listed])
        return 0
    columns = [
        Column("NAME", "id"),
        Column("ROLE"),
        Column("APPS", "text"),
        Column("CREATED"),
        Column("SESSIONS", "num"),
    ]
    rows = [
        [
            o.name,
            o.role.value,
            ",".join(o.app_ids) or "(every app)",
            str(iso_ms(o.created_at)),
            str(o.sessions),
        ]
        for o in listed
    ]
    empty = "no operator yet: `kairos operator create NAME --role viewer` makes one"
    print_table(columns, rows, empty, make_console())
    return 0


def cmd_operator_set(args: argparse.Namespace) -> int:
    """Change an operator's role or apps; its sessions follow at their next request."""
    from common.config import StoreSettings
    from common.operator_roles import Role
    from services.api.operator.operator_accounts import set_operator_access

    role = Role(args.role) if args.role else None
    set_operator_access(
        StoreSettings(), args.name, role, args.app, args.every_app, actor=cli_actor()
    )
    print(f"operator {args.name}: changed; its sessions follow from their next request")
    return 0


def cmd_operator_revoke(args: argparse.Namespace) -> int:
    """Remove a console operator; its sessions end at once."""
    from common.config import StoreSettings
    from services.api.operator.operator_accounts import revoke_operator

    revoke_operator(StoreSettings(), args.name, actor=cli_actor())
    print(f"operator {args.name}: removed; its token no longer signs in, its sessions ended")
    return 0


def _add_app_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--app",
        action="append",
        metavar="APP_ID",
        help=f"{what} (repeat for several apps)",
    )


def add_operator_parsers(sub: Subcommands) -> None:
    """``kairos operator create|list|set|revoke``."""
    operator = sub.add_parser(
        "operator", help="people who may sign in to the web console (/console)"
    ).add_subparsers(dest="operator_cmd", required=True)
    create = operator.add_parser("create", help="create an operator; prints its token once")
    create.add_argument("name", help="1 to 64 letters, digits, '.', '_', '@', '-'")
    create.add_argument("--role", choices=ROLES, required=True, help=ROLE_HELP)
    _add_app_flag(create, "limit the operator to this app; without it: every app")
    create.set_defaults(func=cmd_operator_create)
    listing = operator.add_parser("list", help="list operators, their role and apps (no tokens)")
    listing.add_argument("-o", "--output", choices=["table", "json"], default="table")
    listing.set_defaults(func=cmd_operator_list)
    change = operator.add_parser(
        "set", help="change an operator's role or apps (its sessions follow at once)"
    )
    change.add_argument("name")
    change.add_argument("--role", choices=ROLES, help=ROLE_HELP)
    _add_app_flag(change, "limit the operator to these apps, in place of its list")
    change.add_argument(
        "--every-app", action="store_true", help="lift the operator's app list: every app"
    )
    change.set_defaults(func=cmd_operator_set)
    revoke = operator.add_parser(
        "revoke", help="remove an operator: its token stops working, its sessions end"
    )
    revoke.add_argument("name")
    revoke.set_defaults(func=cmd_operator_revoke)
