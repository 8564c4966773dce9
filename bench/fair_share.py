"""Fair-share benchmark: a quiet app's start lag while another app floods the slots.

It prepares a namespace of its own (``bench_<random hex>``), starts ``kairos api``,
``kairos dispatcher``, ``--workers`` ``kairos worker --capacity`` ``--capacity`` and
``kairos notifier`` as a user would, and creates two apps with the CLI (``kairos app
create``, ``kairos app handlers --allow 'demo.*'``). Then, as in issue 21:

1. app "flood" submits ``--flood`` runs of ``demo.sleep`` (``--run-seconds`` each), due
   now, through the batch API;
2. once the flood has filled the slots, app "quiet" submits ``--quiet`` one-shot jobs of
   the same handler, one every ``--quiet-every`` seconds;
3. it waits for every run to end.

It prints the quiet app's start lag (startedAt - triggerTime, read through the API) as
median, p90 and worst, the flood's throughput (its runs over the span from its first
start to its last end) against what the slots allow, the whole scenario's time (the
flood's first trigger to the last end), and, last, one JSON line:

    {"workers", "capacity", "slots", "flood_runs", "run_seconds", "quiet_jobs",
     "quick_runs", "quiet_start_lag_ms": {"p50", "p90", "max"}, "flood_start_lag_ms": {...},
     "flood_runs_per_s", "slots_runs_per_s", "total_seconds", "duplicates", "commit"}

With ``--quick N``, app "quick" first runs N one-shot ``demo.noop`` jobs (about 1 ms
each) and the scenario starts once they have ended and the workers' heartbeats carry
their times: a worker's queue is then bounded by quick runs when the slow flood comes.
With ``--same-handler`` as well, the quick runs are of the flood's own handler
(``demo.sleep`` of 0 s): the flood is then queued at the handler's quick time, and its
runs must be recalled once it has grown slow.

With ``--weight N`` the quiet app gets weight N first (``kairos app limits``), for when
that command exists. It never fails on time: the exit status is 1 only when a run never
ended, a job ran twice, or the stack broke.

Needs MySQL, Redis and RabbitMQ (with its management API) on 127.0.0.1. Run it from
the repository root:

    .venv/bin/python bench/fair_share.py                      # issue 21's scenario
    .venv/bin/python bench/fair_share.py --workers 2 --capacity 4 --flood 600
    .venv/bin/python bench/fair_share.py --quick 2000 --flood 600   # slow after quick
    .venv/bin/python bench/fair_share.py --quick 2000 --flood 600 --same-handler
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from harness import (
    STARTUP_SECONDS,
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
    print_log_tails,
    scan_logs,
    start_services,
    stop_services,
)
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.schema import executions
from common.namespace import prepare_namespace
from services.stack import DEMO_HANDLERS
from tests.e2e.fair_share_kit import (
    Cli,
    Run,
    Start,
    Tenant,
    create_tenant,
    noop_bodies,
    read_runs,
    read_starts,
    sleep_bodies,
    submit_batches,
    trickle,
    wait_handler_known,
    wait_started,
)

KAIROS = str(Path(sys.executable).parent / "kairos")
FINAL = {"SUCCEEDED", "FAILED", "LOST", "TIMED_OUT", "SKIPPED", "CANCELLED"}


@dataclass(frozen=True)
class Scenario:
    """What one run of the scenario produced: the job ids, the runs, the quiet starts."""

    flood_ids: list[int]
    quiet_ids: list[int]
    runs: list[Run]
    quiet_starts: list[Start]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=2, help="kairos worker processes")
    parser.add_argument("--capacity", type=int, default=8, help="slots per worker")
    parser.add_argument("--flood", type=int, default=4000, help="runs the flood app submits")
    parser.add_argument("--run-seconds", type=float, default=0.5, help="each run's sleep")
    parser.add_argument("--quiet", type=int, default=20, help="one-shot jobs of the quiet app")
    parser.add_argument(
        "--quiet-every", type=float, default=0.5, help="seconds between the quiet app's jobs"
    )
    parser.add_argument(
        "--quick", type=int, default=0, help="demo.noop runs of app 'quick' before the flood"
    )
    parser.add_argument(
        "--same-handler",
        action="store_true",
        help="the quick runs are of the flood's handler (demo.sleep 0 s): it then grows slow",
    )
    parser.add_argument(
        "--weight", type=int, default=None, help="the quiet app's weight (kairos app limits)"
    )
    parser.add_argument(
        "--deadline", type=float, default=900.0, help="seconds to wait for every run to end"
    )
    args = parser.parse_args(argv)
    if min(args.workers, args.capacity, args.flood, args.quiet) < 1:
        parser.error("--workers, --capacity, --flood and --quiet must be at least 1")
    if args.quick < 0:
        parser.error("--quick must be 0 or more")
    return args


def build_services(args: argparse.Namespace, port: int, log_dir: Path) -> list[Service]:
    """api, dispatcher, ``--workers`` workers of ``--capacity`` slots, notifier."""
    argvs = {
        "api": [KAIROS, "api", "--port", str(port)],
        "dispatcher": [KAIROS, "dispatcher"],
        "notifier": [KAIROS, "notifier"],
    }
    for n in range(1, args.workers + 1):
        argv = [KAIROS, "worker", "--id", f"bench-w{n}", "--handlers", DEMO_HANDLERS]
        argvs[f"bench-w{n}"] = [*argv, "--capacity", str(args.capacity)]
    return [Service(name, argv, log_dir / f"{name}.log") for name, argv in argvs.items()]


def stack_env(settings: StoreSettings) -> dict[str, str]:
    """The services' environment: the namespace, and no API rate limit (the flood is
    legitimate; the scenario is about slots)."""
    return {
        **os.environ,
        "KAIROS_NAMESPACE": settings.namespace,
        "KAIROS_RATE_LIMIT_PER_SECOND": "0",
    }


@contextmanager
def fair_stack(
    args: argparse.Namespace, settings: StoreSettings, log_dir: Path
) -> Iterator[tuple[str, list[Service]]]:
    """Prepare the namespace, start the services; stop them and drop it all on exit."""
    port = free_port()
    services = build_services(args, port, log_dir)
    try:
        prepare_namespace(settings)
        start_services(services, stack_env(settings))
        yield f"http://127.0.0.1:{port}", services
    finally:
        stop_services(services)
        drop_namespace(settings)
        scan_logs(services)


def cli_on(settings: StoreSettings) -> Cli:
    """``kairos ARGS`` on the benchmark's namespace, as an operator runs it."""
    env = stack_env(settings)

    def run(*args: str) -> str:
        done = subprocess.run(
            [KAIROS, *args], env=env, capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout

    return run


def wait_all_ended(
    engine: Engine, job_ids: Sequence[int], services: list[Service], seconds: float
) -> list[Run]:
    """Poll until every job has a run and every run has ended; progress every 5 s."""
    deadline = time.monotonic() + seconds
    next_report = 0.0
    while True:
        runs = read_runs(engine, job_ids)
        ended = sum(r.status in FINAL for r in runs)
        if len({r.job_id for r in runs}) >= len(job_ids) and ended == len(runs):
            return runs
        if time.monotonic() >= next_report:
            log(f"runs ended: {ended} of {len(job_ids)}")
            next_report = time.monotonic() + 5.0
        check_alive(services)
        if time.monotonic() > deadline:
            raise BenchError(f"only {ended} of {len(job_ids)} runs ended after {seconds:.0f} s")
        time.sleep(0.5)


# Two heartbeats the workers send after the quick runs, before the flood (every 5 s by
# default): the leader then bounds their queues by the quick runs' times.
QUICK_SETTLE_SECONDS = 11.0


def run_quick(
    args: argparse.Namespace, engine: Engine, quick: Tenant, services: list[Service]
) -> None:
    """App "quick" runs ``--quick`` demo.noop jobs; returns once the workers report them."""
    if args.same_handler:
        bodies = sleep_bodies("quick", args.quick, 0)
    else:
        bodies = noop_bodies("quick", args.quick)
    quick_ids = submit_batches(quick, bodies)
    wait_all_ended(engine, quick_ids, services, args.deadline)
    log(f"{len(quick_ids)} quick runs ended")
    time.sleep(QUICK_SETTLE_SECONDS)


def run_scenario(
    args: argparse.Namespace, engine: Engine, flood: Tenant, quiet: Tenant, services: list[Service]
) -> Scenario:
    """Flood, then trickle, then wait for every run to end."""
    flood_ids = submit_batches(flood, sleep_bodies("flood", args.flood, args.run_seconds))
    log(f"flood of {len(flood_ids)} runs submitted")
    slots = args.workers * args.capacity
    wait_started(engine, flood_ids, slots, 120)
    quiet_ids = trickle(quiet, args.quiet, args.quiet_every, args.run_seconds)
    log(f"{len(quiet_ids)} quiet jobs submitted; waiting for every run to end")
    runs = wait_all_ended(engine, flood_ids + quiet_ids, services, args.deadline)
    log(f"quiet runs' dispatch lag (ms): {dispatch_lags(engine, quiet_ids)}")
    return Scenario(flood_ids, quiet_ids, runs, read_starts(quiet, quiet_ids))


def dispatch_lags(engine: Engine, job_ids: list[int]) -> list[int]:
    """Dispatch minus trigger time of these jobs' runs: how long each waited in Kairos
    (the rest of its start lag it waited in its worker's queue)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(executions.c.dispatched_at - executions.c.trigger_time).where(
                executions.c.job_id.in_(job_ids)
            )
        ).all()
    return sorted(int(r[0]) for r in rows if r[0] is not None)


def lag_figures(lags: list[int]) -> dict[str, int]:
    """Nearest-rank p50, p90 and the worst of some lags (ms)."""
    ordered = sorted(lags)
    return {
        "p50": percentile(ordered, 0.5),
        "p90": percentile(ordered, 0.9),
        "max": ordered[-1],
    }


def duplicates(runs: list[Run]) -> int:
    """Jobs with more than one execution (each job here is one trigger, no retries)."""
    seen: dict[int, int] = {}
    for run in runs:
        seen[run.job_id] = seen.get(run.job_id, 0) + 1
    return sum(n > 1 for n in seen.values())


def build_figures(args: argparse.Namespace, scenario: Scenario) -> dict[str, Any]:
    """The JSON figures of one run."""
    flood = set(scenario.flood_ids)
    flood_runs = [r for r in scenario.runs if r.job_id in flood and r.started_at is not None]
    first_start = min(r.started_at or 0 for r in flood_runs)
    last_end = max(r.ended_at or 0 for r in scenario.runs)
    first_trigger = min(r.trigger_time for r in flood_runs)
    slots = args.workers * args.capacity
    return {
        "workers": args.workers,
        "capacity": args.capacity,
        "slots": slots,
        "flood_runs": len(scenario.flood_ids),
        "run_seconds": args.run_seconds,
        "quiet_jobs": len(scenario.quiet_ids),
        "quiet_weight": args.weight,
        "quick_runs": args.quick,
        "quiet_start_lag_ms": lag_figures([s.lag_ms for s in scenario.quiet_starts]),
        "flood_start_lag_ms": lag_figures(
            [(r.started_at or 0) - r.trigger_time for r in flood_runs]
        ),
        "flood_runs_per_s": round(len(flood_runs) * 1000 / max(1, last_end - first_start), 2),
        "slots_runs_per_s": round(slots / args.run_seconds, 2),
        "total_seconds": round((last_end - first_trigger) / 1000, 1),
        "duplicates": duplicates(scenario.runs),
        "commit": git_commit_dirty(),
    }


def print_report(figures: dict[str, Any]) -> None:
    """Human-readable lines, then the JSON line last."""
    quiet, flood = figures["quiet_start_lag_ms"], figures["flood_start_lag_ms"]
    print(
        f"stack:            {figures['workers']} workers x {figures['capacity']} slots; flood "
        f"{figures['flood_runs']} runs of {figures['run_seconds']} s, quiet {figures['quiet_jobs']}"
    )
    print(f"quiet start lag:  p50 {quiet['p50']} ms, p90 {quiet['p90']} ms, max {quiet['max']} ms")
    print(f"flood start lag:  p50 {flood['p50']} ms, p90 {flood['p90']} ms, max {flood['max']} ms")
    print(
        f"flood throughput: {figures['flood_runs_per_s']} runs/s "
        f"(the slots allow {figures['slots_runs_per_s']})"
    )
    print(
        f"total:            {figures['total_seconds']} s from the flood's trigger to the last end"
    )
    print(f"duplicates:       {figures['duplicates']}")
    print(json.dumps(figures), flush=True)


def measure(
    args: argparse.Namespace, settings: StoreSettings, base: str, services: list[Service]
) -> bool:
    """Create the apps, run the scenario, print the figures; True when all is well."""
    engine = make_engine(settings, pool_size=2)
    try:
        poll_until("GET /healthz 200", lambda: api_healthy(base), services, STARTUP_SECONDS)
        cli = cli_on(settings)
        flood, quiet = (create_tenant(cli, base, name) for name in ("flood", "quiet"))
        if args.weight is not None:
            cli("app", "limits", quiet.app_id, "--weight", str(args.weight))
        wait_handler_known(quiet)
        if args.quick:
            run_quick(args, engine, create_tenant(cli, base, "quick"), services)
        figures = build_figures(args, run_scenario(args, engine, flood, quiet, services))
        print_report(figures)
        return bool(figures["duplicates"] == 0)
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once; 0 when every run ended once, 1 otherwise."""
    args = parse_args(argv)
    settings, log_dir = bench_namespace()
    ok = False
    try:
        with fair_stack(args, settings, log_dir) as (base, services):
            try:
                ok = measure(args, settings, base, services)
            finally:
                if not ok:
                    print_log_tails(services)
    except (BenchError, AssertionError, subprocess.CalledProcessError) as e:
        log(f"FAILED: {e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
