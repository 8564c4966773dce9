"""The ``kairos app`` commands: apps, their API keys, signing secrets and handler
patterns."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from services.cli.app_grants import add_app_grant_parsers
from services.cli.types import Subcommands, cli_actor, number

if TYPE_CHECKING:
    from common.handler_patterns import HandlerPatterns


def cmd_app_create(args: argparse.Namespace) -> int:
    """Create an app, granted the handlers --handlers matches, and print its credentials
    as JSON."""
    from common.config import StoreSettings
    from common.handler_patterns import NO_HANDLER, HandlerPatterns, checked_patterns
    from common.namespace import create_unique_app

    # Checked before any store is touched, as a bad setting is.
    patterns = split_patterns(args.handlers)
    granted = HandlerPatterns(checked_patterns(patterns, "--handlers")) if patterns else NO_HANDLER
    credentials = create_unique_app(StoreSettings(), args.name, granted, actor=cli_actor())
    print(
        json.dumps(
            {
                "appId": credentials.app_id,
                "apiKey": credentials.api_key,
                "keyId": credentials.key_id,
                "signingSecret": credentials.signing_secret,
                "handlerPatterns": list(granted.patterns),
            }
        )
    )
    if not granted.granted:
        print(
            f"kairos: the app may call no handler yet; grant some with `kairos app handlers "
            f"{credentials.app_id} --allow 'report.*'`",
            file=sys.stderr,
        )
    return 0


def split_patterns(given: list[str] | None) -> list[str]:
    """Patterns given as repeated flags, each of them comma-separated: ``'a.*,b'`` (an
    empty piece stays, so that the check names it)."""
    return [p.strip() for text in given or [] for p in text.split(",")]


def cmd_app_list(args: argparse.Namespace) -> int:
    """Print the apps."""
    from common.config import StoreSettings
    from services.api.operator.commands import list_apps

    print(list_apps(StoreSettings()))
    return 0


def _say_key_cache(what: str, cache_seconds: float) -> None:
    print(
        f"kairos: {what} once the API's key cache lets go of it "
        f"(KAIROS_AUTH_CACHE_SECONDS, {cache_seconds:g} s here)",
        file=sys.stderr,
    )


def cmd_app_rotate_key(args: argparse.Namespace) -> int:
    """Give an app a new API key and print it as JSON; its other keys keep working for
    --overlap-hours."""
    from common.config import ApiSettings, StoreSettings
    from common.timefmt import iso_ms
    from services.api.operator.app_access import rotate_key

    # Read before the rotation: a bad setting must not fail the command after it.
    cache_seconds = ApiSettings().auth_cache_seconds
    rotation = rotate_key(StoreSettings(), args.app_id, args.overlap_hours, actor=cli_actor())
    print(
        json.dumps(
            {
                "appId": args.app_id,
                "apiKey": rotation.key.api_key,
                "keyId": rotation.key.key_id,
                "previousKeysWorkUntil": iso_ms(rotation.others_until_ms),
            }
        )
    )
    if args.overlap_hours == 0:
        _say_key_cache("the app's other keys stop working", cache_seconds)
    return 0


def cmd_app_revoke_key(args: argparse.Namespace) -> int:
    """Stop one API key of an app."""
    from common.config import ApiSettings, StoreSettings
    from services.api.operator.app_access import revoke_key

    cache_seconds = ApiSettings().auth_cache_seconds
    if not revoke_key(StoreSettings(), args.app_id, args.key_id, actor=cli_actor()):
        print(
            f"kairos: app {args.app_id!r} has no key {args.key_id!r}; `kairos app keys "
            f"{args.app_id}` lists its keys",
            file=sys.stderr,
        )
        return 2
    print(json.dumps({"appId": args.app_id, "keyId": args.key_id, "revoked": True}))
    _say_key_cache("the key stops working", cache_seconds)
    return 0


def cmd_app_keys(args: argparse.Namespace) -> int:
    """Print an app's API keys (never the keys themselves)."""
    from common.config import StoreSettings
    from services.api.operator.app_access import keys_table

    print(keys_table(StoreSettings(), args.app_id))
    return 0


def cmd_app_disable(args: argparse.Namespace) -> int:
    """Disable an app, or enable it again."""
    from common.config import ApiSettings, StoreSettings
    from services.api.operator.app_access import set_app_disabled

    cache_seconds = ApiSettings().auth_cache_seconds
    disable = args.app_cmd == "disable"
    set_app_disabled(StoreSettings(), args.app_id, disable, actor=cli_actor())
    print(json.dumps({"appId": args.app_id, "disabled": disable}))
    _say_key_cache("the API applies this", cache_seconds)
    return 0


def cmd_app_rotate_secret(args: argparse.Namespace) -> int:
    """Give an app a new signing secret and print it as JSON."""
    from common.config import StoreSettings
    from common.timefmt import iso_ms
    from services.api.operator.commands import rotate_app_secret

    rotation = rotate_app_secret(
        StoreSettings(), args.app_id, args.overlap_hours, args.force, actor=cli_actor()
    )
    print(
        json.dumps(
            {
                "appId": args.app_id,
                "signingSecret": rotation.signing_secret,
                "previousSecretSignsUntil": iso_ms(rotation.previous_valid_until_ms),
            }
        )
    )
    return 0


def cmd_app_handlers(args: argparse.Namespace) -> int:
    """Print, set (--allow), grant every (--all) or withdraw every (--none) handler
    pattern an app's jobs may name."""
    from common.config import ApiSettings, StoreSettings
    from common.handler_patterns import EVERY_HANDLER, NO_HANDLER, HandlerPatterns, checked_patterns
    from services.api.operator.commands import app_handler_patterns, set_app_handler_patterns

    if args.allow is None and not args.all and not args.none:
        patterns = app_handler_patterns(StoreSettings(), args.app_id)
    else:
        if args.allow is not None:
            # Checked before any store is touched, as a bad setting is.
            patterns = HandlerPatterns(checked_patterns(split_patterns(args.allow), "--allow"))
        else:
            patterns = EVERY_HANDLER if args.all else NO_HANDLER
        cache_seconds = ApiSettings().auth_cache_seconds
        outside = set_app_handler_patterns(
            StoreSettings(), args.app_id, patterns, actor=cli_actor()
        )
        _say_handlers_changed(patterns, outside, cache_seconds)
    print(json.dumps({"appId": args.app_id, "handlerPatterns": list(patterns.patterns)}))
    return 0


def _say_handlers_changed(
    patterns: HandlerPatterns, outside: dict[str, int], cache_seconds: float
) -> None:
    """On stderr: when the API applies the change, and which live jobs it leaves out."""
    what = "only handlers matching these patterns" if patterns.granted else "no handler"
    print(
        f"kairos: the app's new jobs may name {what} once the API's key cache lets go of "
        f"the app (KAIROS_AUTH_CACHE_SECONDS, {cache_seconds:g} s here)",
        file=sys.stderr,
    )
    if outside:
        named = ", ".join(f"{handler} ({count})" for handler, count in outside.items())
        print(
            f"kairos: {sum(outside.values())} live jobs of this app name handlers outside "
            f"these patterns: {named}; they keep their schedule, but cannot be triggered, "
            "resumed or changed (the app can pause, cancel or delete them)",
            file=sys.stderr,
        )


MAX_OVERLAP_HOURS = 720


_overlap_hours = number(0, MAX_OVERLAP_HOURS)


def add_app_parsers(sub: Subcommands) -> None:
    """``kairos app ...``: create, list, show, keys, rotate-key, revoke-key, disable,
    enable, rotate-secret, handlers, networks, limits."""
    app = sub.add_parser("app", help="manage API apps").add_subparsers(
        dest="app_cmd", required=True
    )
    create = app.add_parser(
        "create", help="create an app; prints appId, apiKey, keyId, signingSecret"
    )
    create.add_argument("name")
    create.add_argument(
        "--handlers",
        action="append",
        metavar="PATTERNS",
        help="the handlers its jobs may name: comma-separated names or glob patterns "
        "('report.*,billing.export'; '*' for every handler); without it the app may call "
        "no handler until `kairos app handlers APP --allow` grants some",
    )
    create.set_defaults(func=cmd_app_create)
    app.add_parser("list", help="list apps (id, created, state, handlers, name)").set_defaults(
        func=cmd_app_list
    )
    _add_key_parsers(app)
    secret = app.add_parser(
        "rotate-secret",
        help="give an app a new signing secret; prints it; callbacks carry a signature "
        "with the old one too for --overlap-hours",
    )
    secret.add_argument("app_id")
    secret.add_argument(
        "--overlap-hours",
        type=_overlap_hours,
        default=24.0,
        help="how long callbacks are signed with the old secret too (default 24, at most "
        f"{MAX_OVERLAP_HOURS})",
    )
    secret.add_argument(
        "--force",
        action="store_true",
        help="rotate even while an earlier rotation's overlap is open (drops the oldest "
        "secret at once)",
    )
    secret.set_defaults(func=cmd_app_rotate_secret)
    _add_handlers_parser(app)
    add_app_grant_parsers(app)


def _add_key_parsers(app: Subcommands) -> None:
    rotate = app.add_parser(
        "rotate-key",
        help="give an app a new API key; prints it; its other keys keep working for "
        "--overlap-hours",
    )
    rotate.add_argument("app_id")
    rotate.add_argument(
        "--overlap-hours",
        type=_overlap_hours,
        default=24.0,
        help="how long the app's other keys keep working (default 24, at most "
        f"{MAX_OVERLAP_HOURS}; 0: they stop at once)",
    )
    rotate.set_defaults(func=cmd_app_rotate_key)
    revoke = app.add_parser("revoke-key", help="stop one API key of an app at once")
    revoke.add_argument("app_id")
    revoke.add_argument("key_id", help="the key's id (keyId; `kairos app keys` lists them)")
    revoke.set_defaults(func=cmd_app_revoke_key)
    keys = app.add_parser("keys", help="list an app's API keys: id, created, end, state")
    keys.add_argument("app_id")
    keys.set_defaults(func=cmd_app_keys)
    for verb, what in (
        ("disable", "refuse every API call with the app's keys (403)"),
        ("enable", "accept the app's keys again"),
    ):
        parser = app.add_parser(verb, help=what)
        parser.add_argument("app_id")
        parser.set_defaults(func=cmd_app_disable)


def _add_handlers_parser(app: Subcommands) -> None:
    handlers = app.add_parser(
        "handlers",
        help="print the handler patterns an app's jobs may name, or grant them (--allow, "
        "--all) or withdraw them (--none)",
    )
    handlers.add_argument("app_id")
    given = handlers.add_mutually_exclusive_group()
    given.add_argument(
        "--allow",
        action="append",
        metavar="PATTERNS",
        help="handler names or glob patterns ('report.*', 'report.v?'), comma-separated or "
        "repeated; replaces the app's patterns",
    )
    given.add_argument("--all", action="store_true", help="grant every handler (pattern '*')")
    given.add_argument("--none", action="store_true", help="withdraw every handler")
    handlers.set_defaults(func=cmd_app_handlers)
