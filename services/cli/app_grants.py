"""The ``kairos app`` commands on what an app is granted besides its keys: ``networks``
(where its callbacks may reach), ``limits`` (its share weight, cap and quotas) and
``show`` (everything an operator set for it)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from common.db.records import MOST_RETRIES
from services.cli.types import Subcommands, cli_actor, whole_number

if TYPE_CHECKING:
    from common.db.apps import AppRecord

# Bounds an operator may set: past them a typo, not a decision.
MAX_WEIGHT = 1000
MAX_LIMIT = 1_000_000_000
MAX_RUN_LOG_BYTES_PER_HOUR = 10**12


def limit_or_none(low: int, high: int) -> Callable[[str], int | None]:
    """An argparse type: a whole number from ``low`` to ``high``, or ``none`` (no limit)."""

    def parse(text: str) -> int | None:
        if text.strip().lower() == "none":
            return None
        try:
            value = int(text)
        except ValueError:
            message = f"{text!r} is neither a whole number nor 'none'"
            raise argparse.ArgumentTypeError(message) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def app_view(app: AppRecord, default_networks: str) -> dict[str, object]:
    """What ``kairos app show -o json`` prints of an app (no key, no secret)."""
    from common.timefmt import iso_ms

    own = None if app.callback_networks is None else [str(n) for n in app.callback_networks]
    default = [p.strip() for p in default_networks.split(",") if p.strip()]
    limits = app.limits
    return {
        "appId": app.app_id,
        "name": app.name,
        "createdAt": iso_ms(app.created_at),
        "disabled": app.disabled_at is not None,
        "disabledAt": iso_ms(app.disabled_at),
        "handlerPatterns": list(app.handlers.patterns),
        "callbackNetworks": own,
        "callbackNetworksInEffect": default if own is None else own,
        "limits": {
            "weight": limits.weight,
            "maxRunning": limits.max_running,
            "maxJobs": limits.max_jobs,
            "minCronIntervalSeconds": limits.min_cron_interval_seconds,
            "runLogBytesPerHour": limits.run_log_bytes_per_hour,
            "maxRetries": limits.max_retries,
        },
    }


def app_text(view: dict[str, object]) -> str:
    """``app_view`` as lines for a terminal."""
    limits = view["limits"]
    assert isinstance(limits, dict)

    def shown(value: object) -> str:
        if value is None:
            return "none"
        if isinstance(value, list):
            return ", ".join(map(str, value)) or "(none)"
        return str(value)

    networks = shown(view["callbackNetworksInEffect"])
    if view["callbackNetworks"] is None:
        networks += "  (the default, KAIROS_CALLBACK_ALLOWED_NETWORKS)"
    rows = [
        ("app", f"{view['appId']}  {view['name']}"),
        ("created", view["createdAt"]),
        ("state", f"disabled since {view['disabledAt']}" if view["disabled"] else "enabled"),
        ("handlers", shown(view["handlerPatterns"])),
        ("callback networks", networks),
        ("weight", limits["weight"]),
        ("max running", shown(limits["maxRunning"])),
        ("max jobs", shown(limits["maxJobs"])),
        ("min cron interval", shown(limits["minCronIntervalSeconds"])),
        ("run log bytes/hour", shown(limits["runLogBytesPerHour"])),
        ("max retries", limits["maxRetries"]),
    ]
    return "\n".join(f"{name + ':':19} {value}" for name, value in rows)


def cmd_app_show(args: argparse.Namespace) -> int:
    """Print one app: handlers, callback networks, limits, state."""
    from common.config import StoreSettings
    from services.api.operator.app_access import app_details

    view = app_view(app_details(StoreSettings(), args.app_id), default_networks())
    print(json.dumps(view) if args.output == "json" else app_text(view))
    return 0


def cmd_app_networks(args: argparse.Namespace) -> int:
    """Print, set (--allow) or clear (--clear) the networks an app's callbacks may reach."""
    from common.callback_urls import parse_networks
    from common.config import ApiSettings, StoreSettings
    from services.api.operator.app_access import app_details, set_app_networks

    if args.allow is not None or args.clear:
        # Checked before any store is touched, as a bad setting is.
        networks = None if args.clear else parse_networks(",".join(args.allow), "--allow")
        if networks == ():
            print("kairos: --allow: give at least one CIDR, or --clear", file=sys.stderr)
            return 2
        cache_seconds = ApiSettings().auth_cache_seconds
        set_app_networks(StoreSettings(), args.app_id, networks, actor=cli_actor())
        print(
            "kairos: the API applies this once its key cache lets go of the app "
            f"(KAIROS_AUTH_CACHE_SECONDS, {cache_seconds:g} s here), the notifiers within "
            "KAIROS_SECRET_CACHE_SECONDS",
            file=sys.stderr,
        )
    view = app_view(app_details(StoreSettings(), args.app_id), default_networks())
    shown = {k: view[k] for k in ("appId", "callbackNetworks", "callbackNetworksInEffect")}
    print(json.dumps(shown))
    return 0


def default_networks() -> str:
    """``KAIROS_CALLBACK_ALLOWED_NETWORKS`` as this shell sets it."""
    from common.config import CallbackUrlSettings

    return CallbackUrlSettings().callback_allowed_networks


def cmd_app_limits(args: argparse.Namespace) -> int:
    """Print or change an app's share weight, cap on runs at once and quotas."""
    from common.config import StoreSettings
    from common.db.records import AppLimits
    from services.api.operator.app_access import app_details, change_app_limits

    given = {name: getattr(args, name) for name in LIMIT_NAMES if getattr(args, name) is not UNSET}

    def update(limits: AppLimits) -> AppLimits:
        return replace(limits, **given)

    settings = StoreSettings()
    app = (
        change_app_limits(settings, args.app_id, update, actor=cli_actor())
        if given
        else app_details(settings, args.app_id)
    )
    view = app_view(app, default_networks())
    print(json.dumps({"appId": app.app_id, "limits": view["limits"]}))
    return 0


UNSET = object()
LIMIT_NAMES = (
    "weight",
    "max_running",
    "max_jobs",
    "min_cron_interval_seconds",
    "run_log_bytes_per_hour",
    "max_retries",
)


def add_app_grant_parsers(app: Subcommands) -> None:
    """``kairos app show|networks|limits``."""
    show = app.add_parser("show", help="one app: handlers, callback networks, limits, state")
    show.add_argument("app_id")
    show.add_argument("-o", "--output", choices=["table", "json"], default="table")
    show.set_defaults(func=cmd_app_show)
    networks = app.add_parser(
        "networks",
        help="print, set (--allow) or clear (--clear) the non-public networks an app's "
        "callbacks may reach; its list replaces KAIROS_CALLBACK_ALLOWED_NETWORKS for it",
    )
    networks.add_argument("app_id")
    given = networks.add_mutually_exclusive_group()
    given.add_argument(
        "--allow",
        action="append",
        metavar="CIDRS",
        help="comma-separated CIDRs (10.20.0.0/16,fd00::/8), or repeat the flag; replaces "
        "the app's list",
    )
    given.add_argument(
        "--clear", action="store_true", help="back to KAIROS_CALLBACK_ALLOWED_NETWORKS"
    )
    networks.set_defaults(func=cmd_app_networks)
    _add_limits_parser(app)


def _add_limits_parser(app: Subcommands) -> None:
    limits = app.add_parser(
        "limits",
        help="print or set an app's share weight, its cap on runs at once and its quotas "
        "(most jobs stored, shortest schedule interval, run-log bytes per hour, retries per "
        "job); 'none' lifts one",
    )
    limits.add_argument("app_id")
    limits.add_argument(
        "--weight",
        type=whole_number(1, MAX_WEIGHT),
        default=UNSET,
        help=f"its share of the slots against other apps' (default 1, at most {MAX_WEIGHT})",
    )
    for flag, dest, what in (
        ("--max-running", "max_running", "the most runs it may have going at once"),
        ("--max-jobs", "max_jobs", "the most jobs it may keep stored (not ended, not deleted)"),
        (
            "--min-cron-interval",
            "min_cron_interval_seconds",
            "the shortest interval in seconds a schedule of its may have",
        ),
    ):
        limits.add_argument(
            flag,
            type=limit_or_none(1, MAX_LIMIT),
            default=UNSET,
            dest=dest,
            metavar="N|none",
            help=f"{what}; 'none': no limit",
        )
    limits.add_argument(
        "--run-log-bytes-per-hour",
        type=limit_or_none(1, MAX_RUN_LOG_BYTES_PER_HOUR),
        default=UNSET,
        dest="run_log_bytes_per_hour",
        metavar="N|none",
        help="the bytes of run log its runs may store per hour, counted by every worker; "
        "past it a run's later lines are dropped with one line saying so (the run goes "
        "on); 'none': no limit",
    )
    limits.add_argument(
        "--max-retries",
        type=whole_number(0, MOST_RETRIES),
        default=UNSET,
        help=f"the most retries a job of its may ask for and a failed run of its gets, "
        f"jobs stored before included (default and at most {MOST_RETRIES})",
    )
    limits.set_defaults(func=cmd_app_limits)
