"""The ``kairos`` command: the one place that knows every service.

Every flag has an environment variable (``KAIROS_<NAME>``); a flag given on the
command line wins over the variable.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from common.errors import KairosError, StoreUnavailableError
from services.cli.alerts import add_alerts_parsers
from services.cli.apps import add_app_parsers
from services.cli.audit import add_audit_parser
from services.cli.callbacks import add_callbacks_parsers
from services.cli.cluster import add_cluster_parsers
from services.cli.completion import add_completion_parser
from services.cli.jobs import add_jobs_parser
from services.cli.operators import add_operator_parsers
from services.cli.run_logs import add_logs_parser
from services.cli.stuck import cmd_executions_stuck
from services.cli.types import Subcommands, cli_actor

Command = Callable[[argparse.Namespace], int]

STORE_DOWN_EXIT = 3
"""The exit status when a store does not answer (2: any other refusal)."""
SIGPIPE_EXIT = 128 + signal.SIGPIPE
"""The exit status when stdout's reader stopped reading, as a shell reports a tool that
SIGPIPE ended."""


def _overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def cmd_migrate(args: argparse.Namespace) -> int:
    """Create the namespace's database and vhost, then run the migrations."""
    from common.config import StoreSettings
    from common.namespace import prepare_namespace

    settings = StoreSettings()
    prepare_namespace(settings)
    print(f"namespace {settings.namespace}: schema at head, vhost ready")
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    """Serve the OpenAPI."""
    from common.config import ApiSettings
    from services.api.main import run_api

    run_api(ApiSettings(**_overrides(args, ["host", "port", "metrics_port"])))
    return 0


def cmd_dispatcher(args: argparse.Namespace) -> int:
    """Run a dispatcher."""
    from common.config import DispatcherSettings
    from services.dispatcher.main import run_dispatcher

    run_dispatcher(
        DispatcherSettings(**_overrides(args, ["dispatcher_id", "strategy", "metrics_port"]))
    )
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker."""
    from common.config import WorkerSettings
    from services.worker.main import run_worker

    run_worker(
        WorkerSettings(
            **_overrides(args, ["worker_id", "capacity", "prefetch", "handlers", "metrics_port"])
        )
    )
    return 0


def cmd_notifier(args: argparse.Namespace) -> int:
    """Run the callback notifier."""
    from common.config import NotifierSettings
    from services.notifier.main import run_notifier

    run_notifier(NotifierSettings(**_overrides(args, ["concurrency", "metrics_port"])))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    """Run the whole local stack as child processes."""
    from services.stack import run_stack

    return run_stack(
        port=args.port,
        workers=args.workers,
        demo=args.demo,
        handlers=args.handlers,
        notifiers=args.notifiers,
    )


def cmd_executions_fail(args: argparse.Namespace) -> int:
    """Record a stuck execution FAILED with a reason."""
    from common.config import StoreSettings
    from services.api.operator.commands import fail_stuck

    recorded = fail_stuck(
        StoreSettings(), args.execution_id, args.reason, args.wait, actor=cli_actor()
    )
    if recorded:
        print(f"execution {args.execution_id}: recorded FAILED (the job's retry policy applies)")
    else:
        print(
            f"execution {args.execution_id}: FAILED sent; a dispatcher records it when its "
            "results consumer runs"
        )
    return 0


def cmd_executions_requeue(args: argparse.Namespace) -> int:
    """Send an execution that never started to a worker again."""
    from common.config import StoreSettings
    from services.api.operator.commands import requeue_stuck

    requeue_stuck(StoreSettings(), args.execution_id, cli_actor())
    print(f"execution {args.execution_id}: requeued; the leading dispatcher sends it now")
    return 0


_DURATION_UNITS = MappingProxyType({"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0})


def _duration(text: str) -> float:
    """An argparse type: ``90``, ``30s``, ``5m``, ``2h`` or ``1d``, in seconds."""
    unit = _DURATION_UNITS.get(text[-1:].lower())
    number = text[:-1] if unit is not None else text
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (e.g. 90, 30s, 5m, 2h, 1d)"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def _add_metrics_port(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="env KAIROS_METRICS_PORT: serve Prometheus /metrics on this port "
        "(default none: no metrics server); env KAIROS_METRICS_HOST (default 127.0.0.1)",
    )


def _add_service_parsers(sub: Subcommands) -> None:
    api = sub.add_parser("api", help="serve the OpenAPI (Swagger UI at /docs)")
    api.add_argument("--host", help="env KAIROS_HOST (default 127.0.0.1)")
    api.add_argument("--port", type=int, help="env KAIROS_PORT (default 8000)")
    _add_metrics_port(api)
    api.set_defaults(func=cmd_api)
    dispatcher = sub.add_parser("dispatcher", help="claim due jobs and record results")
    dispatcher.add_argument("--id", dest="dispatcher_id", help="env KAIROS_DISPATCHER_ID")
    dispatcher.add_argument(
        "--strategy",
        choices=["equal_cost", "round_robin", "random"],
        help="env KAIROS_STRATEGY (default equal_cost)",
    )
    _add_metrics_port(dispatcher)
    dispatcher.set_defaults(func=cmd_dispatcher)
    worker = sub.add_parser("worker", help="run handlers for dispatched executions")
    worker.add_argument("--id", dest="worker_id", help="env KAIROS_WORKER_ID (unique)")
    worker.add_argument("--capacity", type=int, help="env KAIROS_CAPACITY (default 8)")
    worker.add_argument("--prefetch", type=int, help="env KAIROS_PREFETCH (default 4 x capacity)")
    worker.add_argument(
        "--handlers",
        help="env KAIROS_HANDLERS: handler modules to import, comma-separated (at least one; "
        "the demo handlers are services.worker.demo)",
    )
    _add_metrics_port(worker)
    worker.set_defaults(func=cmd_worker)
    notifier = sub.add_parser("notifier", help="deliver signed callbacks")
    notifier.add_argument("--concurrency", type=int, help="env KAIROS_CONCURRENCY (default 16)")
    _add_metrics_port(notifier)
    notifier.set_defaults(func=cmd_notifier)


def _add_operator_parsers(sub: Subcommands) -> None:
    sub.add_parser("migrate", help="create database and vhost, migrate the schema").set_defaults(
        func=cmd_migrate
    )
    add_app_parsers(sub)
    up = sub.add_parser("up", help="run api, dispatcher, 2 workers and notifier locally")
    up.add_argument(
        "--port",
        type=int,
        help="env KAIROS_PORT: the API's port (default 8000); a port in use is refused",
    )
    up.add_argument("--workers", type=int, default=2, help="how many workers (default 2)")
    up.add_argument(
        "--notifiers",
        type=int,
        default=1,
        help="how many notifiers deliver callbacks (default 1; one per core where every "
        "job calls back)",
    )
    up.add_argument(
        "--handlers",
        help="env KAIROS_HANDLERS: handler modules the workers import, comma-separated",
    )
    up.add_argument(
        "--demo",
        action="store_true",
        help="register the demo handlers (services.worker.demo) on the workers, create an "
        "app and submit a demo job",
    )
    up.set_defaults(func=cmd_up)
    add_jobs_parser(sub)
    add_cluster_parsers(sub)
    add_callbacks_parsers(sub)
    _add_execution_parsers(sub)
    add_operator_parsers(sub)
    add_alerts_parsers(sub)
    add_audit_parser(sub)


def _add_execution_parsers(sub: Subcommands) -> None:
    executions = sub.add_parser(
        "executions", help="executions: a run's log; stuck ones: list, fail or requeue them"
    ).add_subparsers(dest="executions_cmd", required=True)
    stuck = executions.add_parser(
        "stuck", help="executions QUEUED, or SCHEDULED past due, for longer than --older-than"
    )
    stuck.add_argument(
        "--older-than", type=_duration, default=300.0, help="e.g. 90, 30s, 5m (default 5m)"
    )
    stuck.add_argument("-o", "--output", choices=["table", "json"], default="table")
    stuck.set_defaults(func=cmd_executions_stuck)
    fail = executions.add_parser(
        "fail", help="record an unfinished execution FAILED (the job's retry policy applies)"
    )
    fail.add_argument("execution_id")
    fail.add_argument("--reason", required=True, help="kept in the execution's message")
    fail.add_argument(
        "--wait", type=_duration, default=10.0, help="how long to wait for it to be recorded"
    )
    fail.set_defaults(func=cmd_executions_fail)
    requeue = executions.add_parser(
        "requeue", help="send an execution that never started to a live worker again"
    )
    requeue.add_argument("execution_id")
    requeue.set_defaults(func=cmd_executions_requeue)
    add_logs_parser(executions)


def build_parser() -> argparse.ArgumentParser:
    """The full ``kairos`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="kairos",
        description=(
            "Kairos distributed job scheduler. Stores: KAIROS_DATABASE_URL, KAIROS_REDIS_URL, "
            "KAIROS_AMQP_URL, KAIROS_AMQP_MANAGEMENT_URL; KAIROS_NAMESPACE picks the database, "
            "Redis key prefix and vhost (default kairos)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_service_parsers(sub)
    _add_operator_parsers(sub)
    add_completion_parser(sub)
    return parser


def _version() -> str:
    try:
        return metadata.version("kairos")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kairos`` console script."""
    args = build_parser().parse_args(argv)
    func: Command = args.func
    try:
        return _run_to_a_pipe(func, args)
    except BrokenPipeError:
        return _reader_gone()
    except StoreUnavailableError as e:
        print(f"kairos: {e}", file=sys.stderr)
        return STORE_DOWN_EXIT
    except KairosError as e:
        print(f"kairos: {e}", file=sys.stderr)
        return 2
    except ValidationError as e:
        if not e.title.endswith("Settings"):
            raise
        _print_setting_errors(e)
        return 2
    except Exception as e:
        from common.config import StoreSettings
        from services.cli.failures import as_store_outage

        outage = as_store_outage(e, StoreSettings())
        if outage is None:
            raise
        print(f"kairos: {outage}", file=sys.stderr)
        return STORE_DOWN_EXIT if isinstance(outage, StoreUnavailableError) else 2


def _run_to_a_pipe(func: Command, args: argparse.Namespace) -> int:
    """Run the command and flush what it printed, so a reader that stopped reading
    (``| head``) is seen here rather than in a traceback at exit."""
    code = func(args)
    sys.stdout.flush()
    return code


def _reader_gone() -> int:
    """End quietly when stdout's reader has gone, as a Unix tool killed by SIGPIPE does
    (status 128 + SIGPIPE); what is still buffered goes nowhere instead of failing at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_EXIT


def _print_setting_errors(error: ValidationError) -> None:
    """Settings come from flags and KAIROS_* variables: name both, not a traceback."""
    for item in error.errors():
        name = ".".join(str(part) for part in item["loc"])
        print(
            f"kairos: invalid setting {name} (--{name.replace('_', '-')} or "
            f"KAIROS_{name.upper()}): {item['msg']}",
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(main())
