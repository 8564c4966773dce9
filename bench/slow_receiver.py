"""Slow-receiver benchmark (issue 31): another app's callback lag, and callbacks/s, while
one app's receiver answers in 2 s.

Each round prepares a namespace of its own, starts ``kairos api``, ``dispatcher``, one
``worker --capacity 16`` and one ``notifier`` (default concurrency, 16) as a user would,
and creates three apps with the CLI. Then:

1. app "slow" submits ``--slow`` jobs calling back to a receiver answering in
   ``--slow-seconds``;
2. ``--fast-after`` seconds later app "fast" submits ``--fast`` jobs calling back to a
   receiver that answers at once, and app "bulk" ``--bulk`` more to another such one;
3. it waits until every fast and bulk callback arrived (not for the slow ones).

Per round it prints the fast app's callback lag (arrival minus the run's endedAt) as
median and worst, the bulk app's callbacks/s (its callbacks over the span from its
first run's end to its last arrival) and the slow receiver's callbacks/s over the same
span. With ``--old-tree DIR`` (a checkout of the code to compare, e.g. ``git archive
main | tar -x -C DIR``) each round runs that code, then this one, ``--rounds`` pairs
interleaved, and the medians of each side are printed last, with one JSON line.

It never fails on time: the exit status is 1 only when the stack broke or a callback
never arrived within ``--deadline``.

    .venv/bin/python bench/slow_receiver.py --old-tree /tmp/kairos-main --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import (
    BenchError,
    Service,
    api_healthy,
    bench_namespace,
    check_alive,
    drop_namespace,
    free_port,
    git_commit_dirty,
    log,
    percentile,
    poll_until,
    scan_logs,
    start_services,
    stop_services,
)

from common.config import StoreSettings
from common.namespace import prepare_namespace
from services.stack import DEMO_HANDLERS
from tests.e2e.fair_share_kit import Cli, Tenant, create_tenant
from tests.e2e.slow_receiver_kit import Arrival, TimedReceiver, lags_ms, submit_callback_jobs

KAIROS = str(Path(sys.executable).parent / "kairos")


@dataclass(frozen=True)
class Round:
    """What one round measured."""

    code: str
    fast_lag_p50_ms: int
    fast_lag_max_ms: int
    bulk_per_s: float
    slow_per_s: float


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--slow", type=int, default=600, help="callbacks to the slow receiver")
    parser.add_argument("--slow-seconds", type=float, default=2.0, help="its answer time")
    parser.add_argument("--fast", type=int, default=30, help="the fast app's callbacks")
    parser.add_argument("--fast-after", type=float, default=5.0, help="seconds after the slow")
    parser.add_argument("--bulk", type=int, default=1000, help="the bulk app's callbacks")
    parser.add_argument("--rounds", type=int, default=1, help="rounds (pairs with --old-tree)")
    parser.add_argument("--old-tree", type=Path, help="a checkout of the code to compare")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds per round")
    return parser.parse_args(argv)


def stack_env(settings: StoreSettings, tree: Path | None) -> dict[str, str]:
    """The services' environment: the namespace, no API rate limit, and the code tree."""
    env = {**os.environ, "KAIROS_NAMESPACE": settings.namespace}
    env["KAIROS_RATE_LIMIT_PER_SECOND"] = "0"
    env["KAIROS_CALLBACK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


@contextmanager
def stack(
    settings: StoreSettings, log_dir: Path, tree: Path | None
) -> Iterator[tuple[str, list[Service]]]:
    """Prepare the namespace and start the services; stop them and drop it all on exit."""
    port = free_port()
    argvs = {
        "api": [KAIROS, "api", "--port", str(port)],
        "dispatcher": [KAIROS, "dispatcher"],
        "worker": [KAIROS, "worker", "--id", "w1", "--handlers", DEMO_HANDLERS],
        "notifier": [KAIROS, "notifier"],
    }
    argvs["worker"] += ["--capacity", "16"]
    services = [Service(name, argv, log_dir / f"{name}.log") for name, argv in argvs.items()]
    try:
        prepare_namespace(settings)
        start_services(services, stack_env(settings, tree))
        yield f"http://127.0.0.1:{port}", services
    finally:
        stop_services(services)
        drop_namespace(settings)
        scan_logs(services)


def cli_on(settings: StoreSettings, tree: Path | None) -> Cli:
    """``kairos ARGS`` on the round's namespace."""
    env = stack_env(settings, tree)

    def run(*args: str) -> str:
        done = subprocess.run(
            [KAIROS, *args], env=env, capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout

    return run


def rate(arrivals: list[Arrival], since_ms: int, until_ms: int) -> float:
    """Arrivals per second in ``[since_ms, until_ms]``."""
    inside = [a for a in arrivals if since_ms <= a.arrived_ms <= until_ms]
    return len(inside) / max(0.001, (until_ms - since_ms) / 1000)


def wait_arrived(
    receiver: TimedReceiver, ids: list[int], services: list[Service], s: float
) -> None:
    """Poll until every job in ``ids`` has called back."""
    poll_until(f"{len(ids)} callbacks", lambda: receiver.jobs_arrived() >= set(ids), services, s)


def run_round(args: argparse.Namespace, tree: Path | None) -> Round:
    """One round of the scenario on a fresh stack."""
    settings, log_dir = bench_namespace()
    slow_rx, fast_rx, bulk_rx = TimedReceiver(args.slow_seconds), TimedReceiver(), TimedReceiver()
    try:
        with stack(settings, log_dir, tree) as (base, services):
            poll_until("the API", lambda: api_healthy(base), services, 60)
            cli = cli_on(settings, tree)
            slow, fast, bulk = (create_tenant(cli, base, n) for n in ("slow", "fast", "bulk"))
            wait_worker(slow, services)
            submit_callback_jobs(slow, args.slow, slow_rx.url)
            time.sleep(args.fast_after)  # the scenario's pace
            fast_ids = submit_callback_jobs(fast, args.fast, fast_rx.url)
            bulk_ids = submit_callback_jobs(bulk, args.bulk, bulk_rx.url)
            wait_arrived(fast_rx, fast_ids, services, args.deadline)
            wait_arrived(bulk_rx, bulk_ids, services, args.deadline)
            check_alive(services)
    finally:
        for receiver in (slow_rx, fast_rx, bulk_rx):
            receiver.close()
    return measured(tree, fast_rx, bulk_rx, slow_rx)


def wait_worker(tenant: Tenant, services: list[Service]) -> None:
    """Until a worker has registered the no-op handler (a probe due in 2100)."""
    probe = {"jobName": "probe", "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}
    poll_until("demo.noop", lambda: tenant.api.post_job(probe).status_code == 202, services, 60)


def measured(
    tree: Path | None, fast: TimedReceiver, bulk: TimedReceiver, slow: TimedReceiver
) -> Round:
    """The round's figures from what the receivers saw."""
    lags = lags_ms(fast.first_arrivals())
    firsts = bulk.first_arrivals()
    since = min(a.ended_ms for a in firsts)
    until = max(a.arrived_ms for a in firsts)
    return Round(
        "old" if tree is not None else "new",
        percentile(lags, 0.5),
        max(lags),
        round(rate(firsts, since, until), 1),
        round(rate(slow.first_arrivals(), since, until), 1),
    )


def print_round(found: Round) -> None:
    """One round's line."""
    log(
        f"{found.code}: fast lag p50 {found.fast_lag_p50_ms} ms, worst {found.fast_lag_max_ms} "
        f"ms; bulk {found.bulk_per_s}/s, slow receiver {found.slow_per_s}/s meanwhile"
    )


def medians(rounds: list[Round], code: str) -> dict[str, float]:
    """The medians of one side's rounds."""
    mine = [r for r in rounds if r.code == code]
    return {
        "fast_lag_p50_ms": statistics.median(r.fast_lag_p50_ms for r in mine),
        "fast_lag_max_ms": statistics.median(r.fast_lag_max_ms for r in mine),
        "bulk_per_s": statistics.median(r.bulk_per_s for r in mine),
        "slow_per_s": statistics.median(r.slow_per_s for r in mine),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the rounds; print each, then the medians and one JSON line."""
    args = parse_args(argv)
    rounds: list[Round] = []
    try:
        for _ in range(args.rounds):
            for tree in ([args.old_tree] if args.old_tree else []) + [None]:
                found = run_round(args, tree)
                print_round(found)
                rounds.append(found)
    except BenchError as e:
        log(f"benchmark failed: {e}")
        return 1
    summary = {code: medians(rounds, code) for code in sorted({r.code for r in rounds})}
    for code, figures in summary.items():
        log(f"median {code}: {figures}")
    print(
        json.dumps(
            {"rounds": args.rounds, **vars_of(args), **summary, "commit": git_commit_dirty()}
        )
    )
    return 0


def vars_of(args: argparse.Namespace) -> dict[str, object]:
    """The scenario's parameters, for the JSON line."""
    return {k: args.__dict__[k] for k in ("slow", "slow_seconds", "fast", "fast_after", "bulk")}


if __name__ == "__main__":
    raise SystemExit(main())
