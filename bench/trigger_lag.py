"""Trigger-lag benchmark: how precisely the real ``kairos`` processes fire scheduled work.

It prepares a namespace of its own (``bench_<random hex>``), starts ``kairos api``,
``kairos dispatcher``, two ``kairos worker --capacity 16`` and ``kairos notifier`` as a
user would (see ``bench/harness.py``), waits for the workers, runs one job through the
pipeline, then measures two scenarios in one invocation:

A. one-shot burst: ``--jobs`` ``demo.noop`` jobs, all with the same ``triggerAt`` T,
   POSTed from 16 threads well before T. T is picked from a measured submit rate so
   that about ``--lead-seconds`` are left when the last POST returns; the margin is
   printed, and if it is negative the burst is submitted again, once, with more lead.
B. cron: ``--cron-jobs`` jobs with ``cronExpr`` ``* * * * * *`` (every second), measured
   over a window of ``--cron-seconds`` whole seconds that starts after they are all
   submitted; then they are cancelled if the API has ``POST /openapi/jobs/{id}/cancel``,
   else they stop with the stack.

From the namespace's ``executions`` table (cluster-clock epoch ms) it prints, per
scenario, the trigger lag (dispatched_at - trigger_time) and the start lag
(started_at - trigger_time) as nearest-rank p50/p90/p99/max, the executions by status,
for B the triggers per job and SKIPPED rows, and the (job_id, trigger_time) pairs that
have more than one execution, which must never exist. Last comes one JSON line:

    {"jobs_per_instant", "submit_margin_ms", "trigger_lag_ms": {"p50", "p90", "p99",
     "max"}, "start_lag_ms": {...}, "cron_jobs", "cron_seconds", "cron_trigger_lag_ms":
     {...}, "cron_start_lag_ms": {...}, "cron_runs": {"expected_per_job",
     "min_per_job", "max_per_job", "total", "skipped"}, "duplicates", "commit"}

Processes are stopped by pid and the namespace dropped whatever happens; every wait has
a deadline. It never fails on time: the exit status is 1 only when a job of the burst
never ran, a trigger was duplicated, or the stack broke.

Needs MySQL, Redis and RabbitMQ (with its management API) on 127.0.0.1. Run it from
the repository root:

    .venv/bin/python bench/trigger_lag.py
    .venv/bin/python bench/trigger_lag.py --jobs 1000
    .venv/bin/python bench/trigger_lag.py --jobs 100 --cron-jobs 50 --cron-seconds 30

Service logs are kept in a temporary directory whose path is printed; warnings and
errors found in them are summarised at the end, and their tails are printed on failure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import sqlalchemy as sa
from harness import (
    STARTUP_SECONDS,
    BenchError,
    Service,
    api_healthy,
    bench_namespace,
    check_alive,
    git_commit_dirty,
    log,
    namespace_stack,
    poll_until,
    print_log_tails,
    submit_all,
    warm_up,
    workers_registered,
)
from lag_report import (
    CRON_EVERY_SECOND,
    Burst,
    CronRun,
    Row,
    burst_figures,
    cron_figures,
    in_window,
    print_burst,
    print_cron,
    print_duplicates,
    status_counts,
)
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.schema import executions
from common.handler_patterns import EVERY_HANDLER
from common.namespace import create_app_credentials
from common.states import ExecutionStatus

CLIENTS = 16
CALIBRATION_JOBS = 128
FAR_FUTURE_MS = 3_600_000
CRON_SETTLE_MS = 2_000
UNFINISHED = {ExecutionStatus.SCHEDULED.value, ExecutionStatus.QUEUED.value}
CANCEL_PATH = re.compile(r"^/openapi/jobs/\{[^}]+\}/cancel$")
IN_CHUNK = 1000


@dataclass(frozen=True)
class Bench:
    """What every step of the benchmark works with."""

    args: argparse.Namespace
    base: str
    api_key: str
    engine: Engine
    clock: ClusterClock
    services: list[Service]

    def cluster_ms(self, wall_seconds: float) -> int:
        """A ``time.time()`` reading on the cluster clock (they differ only by skew)."""
        return int(wall_seconds * 1000 + self.clock.now_ms() - time.time() * 1000)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=100, help="one-shot jobs per instant (A)")
    parser.add_argument("--cron-jobs", type=int, default=20, help="every-second cron jobs (B)")
    parser.add_argument("--cron-seconds", type=int, default=10, help="cron window length (B)")
    parser.add_argument(
        "--lead-seconds",
        type=float,
        default=4.0,
        help="seconds meant to be left before T when the last POST of A returns",
    )
    parser.add_argument(
        "--deadline", type=float, default=120.0, help="seconds to wait for each scenario's runs"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.cron_jobs < 1 or args.cron_seconds < 1:
        parser.error("--jobs, --cron-jobs and --cron-seconds must be at least 1")
    return args


def read_rows(engine: Engine, job_ids: Sequence[int]) -> list[Row]:
    """Every execution of these jobs."""
    columns = (
        executions.c.job_id,
        executions.c.trigger_time,
        executions.c.status,
        executions.c.dispatched_at,
        executions.c.started_at,
    )
    rows: list[Row] = []
    with engine.connect() as conn:
        for i in range(0, len(job_ids), IN_CHUNK):
            chunk = job_ids[i : i + IN_CHUNK]
            query = sa.select(*columns).where(executions.c.job_id.in_(chunk))
            rows += [Row(*r) for r in conn.execute(query).all()]
    return rows


def duplicate_triggers(engine: Engine) -> list[tuple[int, int, int]]:
    """(job_id, trigger_time, executions) of every trigger with more than one execution."""
    count = sa.func.count().label("n")
    query = (
        sa.select(executions.c.job_id, executions.c.trigger_time, count)
        .group_by(executions.c.job_id, executions.c.trigger_time)
        .having(count > 1)
        .order_by(executions.c.job_id, executions.c.trigger_time)
    )
    with engine.connect() as conn:
        return [(int(j), int(t), int(n)) for j, t, n in conn.execute(query).all()]


def wait_rows(
    bench: Bench, job_ids: Sequence[int], settled: Callable[[list[Row]], bool], seconds: float
) -> list[Row]:
    """Poll the executions of ``job_ids`` until ``settled``; the last rows read at the
    deadline otherwise (the caller reports what is missing). Progress every second."""
    deadline = time.monotonic() + seconds
    next_report = 0.0
    while True:
        rows = read_rows(bench.engine, job_ids)
        if settled(rows) or time.monotonic() > deadline:
            return rows
        if time.monotonic() >= next_report:
            log(f"executions of {len(job_ids)} jobs: {status_counts(rows)}")
            next_report = time.monotonic() + 1.0
        check_alive(bench.services)
        time.sleep(0.1)


def all_jobs_ran(job_ids: Sequence[int]) -> Callable[[list[Row]], bool]:
    """Settled: every job has an execution and none is still SCHEDULED or QUEUED."""
    wanted = set(job_ids)

    def settled(rows: list[Row]) -> bool:
        seen = {r.job_id for r in rows}
        return seen >= wanted and not any(r.status in UNFINISHED for r in rows)

    return settled


def one_shot_body(name: str, trigger_at: int) -> dict[str, Any]:
    """A demo.noop job due at ``trigger_at`` (epoch ms)."""
    return {"jobName": name, "jobHandler": "demo.noop", "params": {}, "triggerAt": trigger_at}


def submit_rate(bench: Bench) -> float:
    """POSTs per second from 16 threads, measured with jobs due an hour from now."""
    due = bench.clock.now_ms() + FAR_FUTURE_MS
    bodies = [one_shot_body(f"calibration {i}", due) for i in range(CALIBRATION_JOBS)]
    seen = submit_all(bench.base, bench.api_key, bodies, CLIENTS)
    if seen.failures:
        raise BenchError(f"calibration POSTs failed: {seen.failures}")
    return seen.accepted / max(1e-3, seen.last_answer - seen.first_post)


def submit_burst(bench: Bench, lead_seconds: float, rate: float) -> Burst:
    """POST the burst with T far enough ahead for ``lead_seconds`` to be left at the end."""
    expected_submit = bench.args.jobs / rate
    trigger_at = bench.clock.now_ms() + int((lead_seconds + expected_submit) * 1000)
    bodies = [one_shot_body(f"burst {i}", trigger_at) for i in range(bench.args.jobs)]
    seen = submit_all(bench.base, bench.api_key, bodies, CLIENTS)
    margin = trigger_at - bench.cluster_ms(seen.last_answer)
    submit_seconds = seen.last_answer - seen.first_post
    print(
        f"A submit:          {seen.accepted}/{bench.args.jobs} accepted in {submit_seconds:.2f} s"
        f" ({seen.accepted / max(1e-3, submit_seconds):.0f} req/s), failures "
        f"{seen.failures or 'none'}; last POST returned {margin} ms before T",
        flush=True,
    )
    return Burst(trigger_at, seen, margin)


def run_burst(bench: Bench) -> tuple[Burst, list[Row]]:
    """Scenario A: submit the burst (again, with more lead, if T passed first), wait for it."""
    rate = submit_rate(bench)
    log(f"submit rate {rate:.0f} req/s from {CLIENTS} threads; submitting the burst")
    burst = submit_burst(bench, bench.args.lead_seconds, rate)
    if burst.margin_ms < 0:
        log("T passed before the last POST returned; waiting for that burst, then again")
        wait_burst(bench, burst)
        spent = burst.seen.last_answer - burst.seen.first_post
        burst = submit_burst(bench, max(1.0, bench.args.lead_seconds) + 2 * spent, rate)
    if burst.margin_ms < 0:
        log(f"WARNING: T passed {-burst.margin_ms} ms before the last POST returned, twice")
    return burst, wait_burst(bench, burst)


def wait_burst(bench: Bench, burst: Burst) -> list[Row]:
    """The burst's executions once every job ran, or at T + deadline."""
    until_t = max(0.0, (burst.trigger_at - bench.clock.now_ms()) / 1000)
    settled = all_jobs_ran(burst.seen.job_ids)
    return wait_rows(bench, burst.seen.job_ids, settled, until_t + bench.args.deadline)


def cron_body(name: str) -> dict[str, Any]:
    """A demo.noop job that fires every second."""
    return {"jobName": name, "jobHandler": "demo.noop", "params": {}, "cronExpr": CRON_EVERY_SECOND}


def run_cron(bench: Bench) -> tuple[CronRun, list[Row]]:
    """Scenario B: submit the cron jobs, measure a window of whole seconds, cancel them."""
    bodies = [cron_body(f"cron {i}") for i in range(bench.args.cron_jobs)]
    seen = submit_all(bench.base, bench.api_key, bodies, CLIENTS)
    if seen.failures:
        log(f"cron POSTs failed: {seen.failures}")
    start = (bench.cluster_ms(seen.last_answer) // 1000 + 2) * 1000
    run = CronRun(seen, start, start + bench.args.cron_seconds * 1000)
    log(f"cron window [{run.window_start}, {run.window_end}) ms on the cluster clock")

    def settled(rows: list[Row]) -> bool:
        inside = in_window(run, rows)
        over = bench.clock.now_ms() >= run.window_end + CRON_SETTLE_MS
        return over and not any(r.status in UNFINISHED for r in inside)

    until_end = (run.window_end + CRON_SETTLE_MS - bench.clock.now_ms()) / 1000
    rows = wait_rows(bench, seen.job_ids, settled, until_end + bench.args.deadline)
    cancel_jobs(bench, seen.job_ids)
    return run, rows


def cancel_path(base: str) -> str | None:
    """The cancel route's template when the OpenAPI document has one."""
    try:
        paths = httpx.get(f"{base}/openapi.json", timeout=10.0).json().get("paths", {})
    except (httpx.HTTPError, ValueError):
        return None
    for path, operations in paths.items():
        if CANCEL_PATH.match(path) and "post" in operations:
            return str(path)
    return None


def cancel_jobs(bench: Bench, job_ids: Sequence[int]) -> None:
    """Cancel the cron jobs through the control API, or leave them to the stack's stop."""
    template = cancel_path(bench.base)
    if template is None:
        log("no POST /openapi/jobs/{id}/cancel in the API; cron jobs stop with the stack")
        return
    headers = {"Authorization": f"Bearer {bench.api_key}"}
    answers: Counter[str] = Counter()
    with httpx.Client(base_url=bench.base, headers=headers, timeout=10.0) as client:
        for job_id in job_ids:
            path = re.sub(r"\{[^}]+\}", str(job_id), template)
            try:
                answers[str(client.post(path).status_code)] += 1
            except httpx.HTTPError as e:
                answers[type(e).__name__] += 1
    log(f"cancelled {len(job_ids)} cron jobs via {template}: {dict(answers)}")


def start_bench(
    args: argparse.Namespace, settings: StoreSettings, base: str, services: list[Service]
) -> Bench:
    """The shared context: an app's key, an engine and the cluster clock."""
    api_key = create_app_credentials(settings, "bench trigger lag", EVERY_HANDLER).api_key
    engine = make_engine(settings, pool_size=2)
    clock = ClusterClock(redis.Redis.from_url(settings.redis_url, socket_timeout=10))
    return Bench(args, base, api_key, engine, clock, services)


def measure(bench: Bench) -> bool:
    """Wait for the stack, run both scenarios, print the figures; True when all is well."""
    poll_until("GET /healthz 200", lambda: api_healthy(bench.base), bench.services, STARTUP_SECONDS)
    poll_until("workers registered", lambda: workers_registered(bench.engine), bench.services, 60)
    headers = {"Authorization": f"Bearer {bench.api_key}"}
    with httpx.Client(base_url=bench.base, headers=headers, timeout=10.0) as client:
        warm_id = warm_up(client, bench.engine, bench.services)
    log(f"pipeline warm (warm-up job {warm_id}); scenario A: {bench.args.jobs} jobs at T")
    burst, burst_rows = run_burst(bench)
    print_burst(burst, burst_rows)
    log(f"scenario B: {bench.args.cron_jobs} cron jobs for {bench.args.cron_seconds} s")
    run, cron_rows = run_cron(bench)
    figures = {
        **burst_figures(burst, burst_rows),
        **cron_figures(bench.args.cron_seconds, run, cron_rows),
    }
    print_cron(run, cron_rows, figures)
    duplicates = duplicate_triggers(bench.engine)
    print_duplicates(duplicates)
    figures |= {"duplicates": len(duplicates), "commit": git_commit_dirty()}
    print(json.dumps(figures), flush=True)
    return not duplicates and all_jobs_ran(burst.seen.job_ids)(burst_rows)


def run(args: argparse.Namespace, settings: StoreSettings, log_dir: Path) -> bool:
    """Start the stack, measure, and print the service logs' tails if anything went wrong."""
    with namespace_stack(settings, log_dir) as (base, services):
        bench = start_bench(args, settings, base, services)
        ok = False
        try:
            ok = measure(bench)
            return ok
        finally:
            if not ok:
                print_log_tails(services)
            bench.engine.dispose()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once; 0 when every trigger ran exactly once, 1 otherwise."""
    args = parse_args(argv)
    settings, log_dir = bench_namespace()
    try:
        return 0 if run(args, settings, log_dir) else 1
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
