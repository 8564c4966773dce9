"""End-to-end benchmark: the real ``kairos`` processes, from POST to SUCCEEDED.

It prepares a namespace of its own (``bench_<random hex>``), starts ``kairos api``,
``kairos dispatcher``, two ``kairos worker`` and ``kairos notifier`` as a user would,
submits ``--jobs`` ``demo.noop`` jobs due now from ``--clients`` threads over the
OpenAPI, and polls MySQL until every one of them has SUCCEEDED. It prints figures
(submit rate, end-to-end jobs/s, create-to-start latency) and, last, one JSON line.
Processes are stopped and the namespace dropped whatever happens. It never fails on
time; it fails only when the pipeline does not finish.

Needs MySQL, Redis and RabbitMQ (with its management API) on 127.0.0.1. Run it from
the repository root:

    .venv/bin/python bench/e2e.py --jobs 2000
    .venv/bin/python bench/e2e.py --jobs 300 --clients 8

Service logs are kept in a temporary directory whose path is printed; warnings and
errors found in them are summarised at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx
import sqlalchemy as sa
from harness import (
    STARTUP_SECONDS,
    BenchError,
    Service,
    Submission,
    api_healthy,
    bench_namespace,
    check_alive,
    git_commit,
    log,
    namespace_stack,
    noop_body,
    percentile,
    poll_until,
    submit_all,
    warm_up,
    workers_registered,
)
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.schema import executions, jobs
from common.handler_patterns import EVERY_HANDLER
from common.namespace import create_app_credentials
from common.states import ExecutionStatus


@dataclass(frozen=True)
class Completion:
    """When the poll saw every job done, and the execution counts it saw then."""

    seen_done_at: float
    last_ended_ms: int
    counts: dict[str, int]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=2000, help="demo.noop jobs to submit")
    parser.add_argument("--clients", type=int, default=16, help="concurrent submitting threads")
    parser.add_argument(
        "--deadline", type=float, default=300.0, help="seconds to wait for all jobs to succeed"
    )
    return parser.parse_args(argv)


def execution_counts(engine: Engine, after_job_id: int) -> dict[str, int]:
    """Executions of the measured jobs by status, plus ``jobs_succeeded`` (distinct jobs)."""
    by_status = (
        sa.select(executions.c.status, sa.func.count())
        .where(executions.c.job_id > after_job_id)
        .group_by(executions.c.status)
    )
    succeeded_jobs = sa.select(sa.func.count(sa.distinct(executions.c.job_id))).where(
        executions.c.job_id > after_job_id, executions.c.status == ExecutionStatus.SUCCEEDED
    )
    with engine.connect() as conn:
        counts = {str(status): int(n) for status, n in conn.execute(by_status).all()}
        counts["jobs_succeeded"] = int(conn.execute(succeeded_jobs).scalar_one())
    return counts


def last_ended_ms(engine: Engine, after_job_id: int) -> int:
    """The latest ended_at (cluster epoch ms) of a measured SUCCEEDED execution."""
    query = sa.select(sa.func.max(executions.c.ended_at)).where(
        executions.c.job_id > after_job_id, executions.c.status == ExecutionStatus.SUCCEEDED
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one() or 0)


def wait_all_done(
    engine: Engine, after_job_id: int, expected: int, services: list[Service], seconds: float
) -> Completion:
    """Poll MySQL until ``expected`` measured jobs have SUCCEEDED; progress every second."""
    deadline = time.monotonic() + seconds
    next_report = 0.0
    while True:
        counts = execution_counts(engine, after_job_id)
        if counts["jobs_succeeded"] >= expected:
            seen = time.time()
            return Completion(seen, last_ended_ms(engine, after_job_id), counts)
        if time.monotonic() >= next_report:
            log(f"done {counts['jobs_succeeded']}/{expected} executions {counts}")
            next_report = time.monotonic() + 1.0
        check_alive(services)
        if time.monotonic() > deadline:
            raise BenchError(f"only {counts['jobs_succeeded']}/{expected} done after {seconds} s")
        time.sleep(0.1)


def create_to_start_ms(engine: Engine, after_job_id: int) -> list[int]:
    """started_at - created_at of each measured job's SUCCEEDED execution, sorted."""
    query = (
        sa.select(executions.c.started_at - jobs.c.created_at)
        .select_from(executions.join(jobs, executions.c.job_id == jobs.c.id))
        .where(jobs.c.id > after_job_id, executions.c.status == ExecutionStatus.SUCCEEDED)
    )
    with engine.connect() as conn:
        return sorted(int(value) for value in conn.execute(query).scalars())


def build_figures(
    args: argparse.Namespace, seen: Submission, done: Completion, latencies: list[int]
) -> dict[str, Any]:
    """The JSON figures of one run."""
    submit_seconds = seen.last_answer - seen.first_post
    pipeline_seconds = done.last_ended_ms / 1000 - seen.first_post
    return {
        "jobs": seen.accepted,
        "clients": args.clients,
        "submit_req_per_s": round(args.jobs / submit_seconds, 1),
        "jobs_per_s": round(seen.accepted / pipeline_seconds, 1),
        "create_to_start_ms_p50": percentile(latencies, 0.50),
        "create_to_start_ms_p99": percentile(latencies, 0.99),
        "create_to_start_ms_max": latencies[-1],
        "commit": git_commit(),
    }


def print_report(seen: Submission, done: Completion, figures: dict[str, Any]) -> None:
    """Human-readable lines, then the JSON line last."""
    submit_seconds = seen.last_answer - seen.first_post
    pipeline_seconds = done.last_ended_ms / 1000 - seen.first_post
    print(f"submitted:        {figures['jobs']} jobs from {figures['clients']} clients")
    print(f"submit:           {submit_seconds:.2f} s, {figures['submit_req_per_s']} req/s")
    print(f"failed requests:  {seen.failures or 'none'}")
    print(f"first POST to last SUCCEEDED ended_at: {pipeline_seconds:.2f} s")
    print(f"first POST to poll seeing all done:    {done.seen_done_at - seen.first_post:.2f} s")
    print(f"throughput:       {figures['jobs_per_s']} jobs/s end to end")
    print(
        "create to start:  "
        f"p50 {figures['create_to_start_ms_p50']} ms, "
        f"p99 {figures['create_to_start_ms_p99']} ms, "
        f"max {figures['create_to_start_ms_max']} ms"
    )
    print(f"executions:       {done.counts}")
    print(json.dumps(figures), flush=True)


def measure(
    args: argparse.Namespace, settings: StoreSettings, base: str, services: list[Service]
) -> dict[str, Any]:
    """Warm the pipeline up, submit the jobs, wait for them, and return the figures."""
    api_key = create_app_credentials(settings, "bench", EVERY_HANDLER).api_key
    engine = make_engine(settings, pool_size=2)
    try:
        poll_until("GET /healthz 200", lambda: api_healthy(base), services, STARTUP_SECONDS)
        poll_until("workers registered", lambda: workers_registered(engine), services, 60)
        headers = {"Authorization": f"Bearer {api_key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=10.0) as client:
            warm_id = warm_up(client, engine, services)
        log(f"pipeline warm (warm-up job {warm_id}); submitting {args.jobs} jobs")
        bodies = [noop_body(f"bench {index}") for index in range(args.jobs)]
        seen = submit_all(base, api_key, bodies, args.clients)
        log(f"submitted: {seen.accepted} accepted, failures {seen.failures or 'none'}")
        done = wait_all_done(engine, warm_id, seen.accepted, services, args.deadline)
        figures = build_figures(args, seen, done, create_to_start_ms(engine, warm_id))
        print_report(seen, done, figures)
        return figures
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once; 0 when every job succeeded, 1 otherwise."""
    args = parse_args(argv)
    settings, log_dir = bench_namespace()
    try:
        with namespace_stack(settings, log_dir) as (base, services):
            measure(args, settings, base, services)
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
