"""Scale benchmark: the due scan and the dispatcher's memory on a table of 1,000,000 jobs.

It prepares a namespace of its own (``scale_<random hex>``) and fills its ``jobs``
table with ``--jobs`` scheduled WAITING ``demo.noop`` jobs whose ``next_trigger_time``
is spread evenly at random over the next 30 days (so few are due at any time), in
multi-row INSERTs of ``--rows-per-insert`` rows, printing progress. Then it measures:

1. the due scan exactly as the dispatcher runs it,
   ``common.db.due_jobs.find_due_jobs(conn, now + 1000, handlers, 500, skip_locked=True)``
   (locking, as the claim thread runs it) with the handlers
   a default worker registers: median and p99 over 50 runs, with the EXPLAIN of the
   statement it sends (captured from the driver, so it is the same SQL);
2. that same statement with ``IGNORE INDEX (ix_jobs_status_next_trigger)``: median over
   5 runs, with its EXPLAIN;
3. ``kairos dispatcher`` and one ``kairos worker`` (so handlers are live) on that
   namespace for ``--seconds``, with ``--due-jobs`` more jobs due evenly during that
   window: the dispatcher's RSS (psutil, by pid) every second from when it leads,
   start / peak / end and whether it stays flat (peak within 5% or 4 MB of start), and
   how many of the due jobs ran with their trigger lag.

Last comes one JSON line:

    {"jobs", "due_scan_ms": {"p50", "p99"}, "due_scan_no_index_ms": {"p50"},
     "dispatcher_rss_mb": {"start", "peak", "end"}, "commit"}

Processes are stopped by pid and the namespace dropped whatever happens; every wait has
a deadline. It never fails on time; the exit status is 1 only when the stack broke.

Needs MySQL, Redis and RabbitMQ (with its management API) on 127.0.0.1. Run it from
the repository root:

    .venv/bin/python bench/scale.py
    .venv/bin/python bench/scale.py --jobs 100000 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis
import sqlalchemy as sa
from harness import (
    BenchError,
    Service,
    check_alive,
    drop_namespace,
    git_commit_dirty,
    log,
    poll_until,
    print_log_tails,
    scan_logs,
    start_services,
    stop_on_sigterm,
    stop_services,
)
from scale_fill import app_pk, fill, insert_jobs
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.due_jobs import find_due_jobs
from common.db.engine import make_engine
from common.db.schema import executions, jobs, workers
from common.handler_patterns import EVERY_HANDLER
from common.keys import RedisKeys
from common.namespace import create_app_credentials, prepare_namespace
from common.states import ExecutionStatus
from services.stack import DEMO_HANDLERS
from services.worker.registry import collect_handlers

DUE_INDEX = "ix_jobs_status_next_trigger"
SCAN_LIMIT = 500
SCAN_AHEAD_MS = 1000
SCAN_RUNS = 50
NO_INDEX_RUNS = 5
WORKER_ID = "scale-w1"
STARTUP_SECONDS = 60.0
FLAT_FRACTION = 0.05
FLAT_MB = 4.0
MB = 1024 * 1024


@dataclass(frozen=True)
class ScanFigures:
    """Due scan timings in ms, with and without the index."""

    indexed_ms: list[float]
    no_index_ms: list[float]
    rows: int


@dataclass(frozen=True)
class RssFigures:
    """The dispatcher's RSS samples (MB) and what the due jobs of the window did."""

    samples_mb: list[float]
    cpu_seconds: float
    due_ran: int
    lag_ms: list[int]

    @property
    def flat(self) -> bool:
        """True when the peak stays within 5% (or 4 MB) of the first sample."""
        start = self.samples_mb[0]
        return max(self.samples_mb) - start <= max(start * FLAT_FRACTION, FLAT_MB)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="WAITING jobs to insert")
    parser.add_argument("--rows-per-insert", type=int, default=5000, help="rows per INSERT")
    parser.add_argument("--seconds", type=int, default=30, help="dispatcher sampling window")
    parser.add_argument(
        "--due-jobs", type=int, default=300, help="extra jobs due during the window"
    )
    return parser.parse_args(argv)


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def capture_due_scan(engine: Engine, now_ms: int, handlers: list[str]) -> tuple[str, Any]:
    """The SQL and parameters ``find_due_jobs`` sends to the driver."""
    seen: list[tuple[str, Any]] = []

    def capture(*args: Any) -> None:
        seen.append((args[2], args[3]))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with engine.connect() as conn:
            find_due_jobs(conn, now_ms + SCAN_AHEAD_MS, handlers, SCAN_LIMIT, skip_locked=True)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    return seen[-1]


def print_explain(conn: Connection, title: str, sql: str, params: Any) -> None:
    """EXPLAIN of ``sql``, one line per row."""
    result = conn.exec_driver_sql(f"EXPLAIN {sql}", params)
    print(f"EXPLAIN {title}:")
    for row in result.mappings():
        print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))


def time_due_scan(conn: Connection, clock: ClusterClock, handlers: list[str]) -> list[float]:
    """Run ``find_due_jobs`` as the dispatcher does, once to warm, then timed."""
    times: list[float] = []
    for run in range(SCAN_RUNS + 1):
        until = clock.now_ms() + SCAN_AHEAD_MS
        started = time.perf_counter()
        # As the claim thread runs it: locking, passing over rows an open claim holds.
        find_due_jobs(conn, until, handlers, SCAN_LIMIT, skip_locked=True)
        elapsed = (time.perf_counter() - started) * 1000
        conn.rollback()
        if run:
            times.append(elapsed)
    return times


def time_no_index(conn: Connection, sql: str, params: Any) -> list[float]:
    """The captured statement with the due index ignored, timed (rows fetched)."""
    times: list[float] = []
    for _ in range(NO_INDEX_RUNS):
        started = time.perf_counter()
        conn.exec_driver_sql(sql, params).all()
        times.append((time.perf_counter() - started) * 1000)
        conn.rollback()
    return times


def measure_scans(engine: Engine, clock: ClusterClock, handlers: list[str]) -> ScanFigures:
    """Both scans, with their EXPLAIN printed."""
    sql, params = capture_due_scan(engine, clock.now_ms(), handlers)
    no_index_sql = sql.replace("FROM jobs", f"FROM jobs IGNORE INDEX ({DUE_INDEX})", 1)
    if no_index_sql == sql:
        raise BenchError(f"cannot find 'FROM jobs' in the due scan: {sql}")
    print(f"due scan SQL: {' '.join(sql.split())}")
    with engine.connect() as conn:
        print_explain(conn, "due scan", sql, params)
        indexed = time_due_scan(conn, clock, handlers)
        rows = len(conn.exec_driver_sql(sql, params).all())
        conn.rollback()
        print_explain(conn, f"due scan IGNORE INDEX ({DUE_INDEX})", no_index_sql, params)
        log(f"timing the scan without {DUE_INDEX} ({NO_INDEX_RUNS} runs)")
        no_index = time_no_index(conn, no_index_sql, params)
    return ScanFigures(indexed, no_index, rows)


def scale_services(log_dir: Path) -> list[Service]:
    """One dispatcher and one worker, as a user would start them."""
    kairos = str(Path(sys.executable).parent / "kairos")
    argvs = {
        "dispatcher": [kairos, "dispatcher"],
        WORKER_ID: [
            *(kairos, "worker", "--id", WORKER_ID, "--capacity", "16"),
            *("--handlers", DEMO_HANDLERS),
        ],
    }
    return [Service(name, argv, log_dir / f"{name}.log") for name, argv in argvs.items()]


@contextmanager
def running(services: list[Service], settings: StoreSettings) -> Iterator[list[Service]]:
    """Start the services in the namespace; stop them by pid on exit."""
    # The per-app rate limit (on by default) would measure itself, not Kairos.
    env = {
        **os.environ,
        "KAIROS_NAMESPACE": settings.namespace,
        "KAIROS_RATE_LIMIT_PER_SECOND": "0",
    }
    try:
        start_services(services, env)
        yield services
    except BenchError:
        print_log_tails(services)
        raise
    finally:
        stop_services(services)
        scan_logs(services)


def wait_leading(
    engine: Engine, client: redis.Redis, keys: RedisKeys, services: list[Service]
) -> None:
    """Until the worker has registered and the dispatcher holds the lease."""

    def registered() -> bool:
        query = sa.select(sa.func.count()).where(workers.c.worker_id == WORKER_ID)
        with engine.connect() as conn:
            return int(conn.execute(query).scalar_one()) > 0

    def leading() -> bool:
        return bool(client.exists(keys.dispatcher_lease))

    poll_until("worker registered", registered, services, STARTUP_SECONDS)
    poll_until("dispatcher lease held", leading, services, STARTUP_SECONDS)


def sample_rss(pid: int, seconds: int, services: list[Service]) -> tuple[list[float], float]:
    """RSS (MB) of ``pid`` once a second for ``seconds``; and its CPU seconds meanwhile."""
    process = psutil.Process(pid)
    cpu_before = sum(process.cpu_times()[:2])
    samples: list[float] = []
    started = time.monotonic()
    for tick in range(seconds + 1):
        check_alive(services)
        samples.append(process.memory_info().rss / MB)
        if tick % 5 == 0:
            log(f"dispatcher RSS {samples[-1]:.1f} MB at {tick} s")
        time.sleep(max(0.0, started + tick + 1 - time.monotonic()))
    return samples, sum(process.cpu_times()[:2]) - cpu_before


def due_outcome(engine: Engine, after_id: int) -> tuple[int, list[int]]:
    """Of the jobs after ``after_id``: how many SUCCEEDED, and their trigger lags (ms)."""
    query = sa.select(executions.c.dispatched_at - executions.c.trigger_time).where(
        executions.c.job_id > after_id, executions.c.status == ExecutionStatus.SUCCEEDED
    )
    with engine.connect() as conn:
        lags = sorted(int(v) for v in conn.execute(query).scalars())
    return len(lags), lags


def due_during(now_ms: int, seconds: int, count: int) -> list[int]:
    """``count`` trigger times spread evenly from 1 s ahead to 3 s before the window ends."""
    first, last = now_ms + 1000, now_ms + max(2000, seconds * 1000 - 3000)
    return [first + (last - first) * i // max(1, count) for i in range(count)]


def wait_due_ran(engine: Engine, after_id: int, count: int, services: list[Service]) -> None:
    """Give the window's due jobs up to 15 s more to succeed; report, never raise."""

    def all_ran() -> bool:
        return due_outcome(engine, after_id)[0] >= count

    try:
        poll_until("window's due jobs SUCCEEDED", all_ran, services, 15)
    except BenchError as e:
        log(f"{e}; reporting what ran")


def measure_dispatcher(
    args: argparse.Namespace, settings: StoreSettings, engine: Engine, app: int, log_dir: Path
) -> RssFigures:
    """Run dispatcher and worker for the window with due jobs; sample the RSS."""
    client = redis.Redis.from_url(settings.redis_url)
    clock = ClusterClock(client)
    try:
        with running(scale_services(log_dir), settings) as services:
            wait_leading(engine, client, RedisKeys(settings.namespace), services)
            after_id = max_job_id(engine)
            due = due_during(clock.now_ms(), args.seconds, args.due_jobs)
            insert_jobs(engine, app, due, args.rows_per_insert)
            log(f"dispatcher leading; {args.due_jobs} jobs due over the next {args.seconds} s")
            dispatcher = services[0].process
            assert dispatcher is not None
            samples, cpu = sample_rss(dispatcher.pid, args.seconds, services)
            wait_due_ran(engine, after_id, args.due_jobs, services)
            count, lags = due_outcome(engine, after_id)
    finally:
        client.close()
    return RssFigures(samples, cpu, count, lags)


def max_job_id(engine: Engine) -> int:
    """The highest job id so far."""
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.max(jobs.c.id))).scalar_one() or 0)


def print_scans(args: argparse.Namespace, fill_seconds: float, scans: ScanFigures) -> None:
    """The fill and scan lines."""
    p50, p99 = nearest_rank(scans.indexed_ms, 0.5), nearest_rank(scans.indexed_ms, 0.99)
    no_index = statistics.median(scans.no_index_ms)
    rate = args.jobs / fill_seconds
    print(f"fill: {args.jobs:,} rows in {fill_seconds:.1f} s ({rate:,.0f} rows/s)")
    slowest = ", ".join(f"{v:.1f}" for v in sorted(scans.indexed_ms)[-3:])
    print(f"due scan ({scans.rows} rows due): p50 {p50:.2f} ms, p99 {p99:.2f} ms over {SCAN_RUNS}")
    print(f"  p90 {nearest_rank(scans.indexed_ms, 0.9):.2f} ms; slowest three {slowest} ms")
    print(f"due scan without {DUE_INDEX}: median {no_index:.1f} ms ({no_index / p50:.0f}x)")


def print_dispatcher(args: argparse.Namespace, rss: RssFigures) -> None:
    """The RSS, CPU and due-job lines."""
    start, peak, end = rss.samples_mb[0], max(rss.samples_mb), rss.samples_mb[-1]
    shape = "flat" if rss.flat else "NOT flat"
    print(f"dispatcher RSS: start {start:.1f} MB, peak {peak:.1f} MB, end {end:.1f} MB; {shape}")
    print(f"  samples (MB, 1 s apart): {[round(v, 1) for v in rss.samples_mb]}")
    share = 100 * rss.cpu_seconds / args.seconds
    print(f"dispatcher CPU over {args.seconds} s: {rss.cpu_seconds:.2f} s ({share:.1f}% of a core)")
    lags = "none ran"
    if rss.lag_ms:
        p50, p99 = nearest_rank(rss.lag_ms, 0.5), nearest_rank(rss.lag_ms, 0.99)
        lags = f"trigger lag p50 {p50} ms, p99 {p99} ms, max {rss.lag_ms[-1]} ms"
    print(f"window's due jobs: {rss.due_ran}/{args.due_jobs} SUCCEEDED; {lags}")


def report(
    args: argparse.Namespace, fill_seconds: float, scans: ScanFigures, rss: RssFigures
) -> None:
    """Human-readable lines, then the JSON line last."""
    print_scans(args, fill_seconds, scans)
    print_dispatcher(args, rss)
    figures = {
        "jobs": args.jobs,
        "due_scan_ms": {
            "p50": round(nearest_rank(scans.indexed_ms, 0.5), 3),
            "p99": round(nearest_rank(scans.indexed_ms, 0.99), 3),
        },
        "due_scan_no_index_ms": {"p50": round(statistics.median(scans.no_index_ms), 1)},
        "dispatcher_rss_mb": {
            "start": round(rss.samples_mb[0], 1),
            "peak": round(max(rss.samples_mb), 1),
            "end": round(rss.samples_mb[-1], 1),
        },
        "commit": git_commit_dirty(),
    }
    print(json.dumps(figures), flush=True)


def measure(args: argparse.Namespace, settings: StoreSettings, log_dir: Path) -> None:
    """Fill the table, time the scans, run the dispatcher; print the report."""
    prepare_namespace(settings)
    credentials = create_app_credentials(settings, "scale", EVERY_HANDLER)
    engine = make_engine(settings, pool_size=2)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        clock = ClusterClock(client)
        app = app_pk(engine, credentials.app_id)
        log(f"filling {args.jobs:,} jobs, {args.rows_per_insert} rows per INSERT")
        fill_seconds = fill(engine, app, args.jobs, args.rows_per_insert, clock.now_ms())
        handlers = sorted(collect_handlers([DEMO_HANDLERS]))
        scans = measure_scans(engine, clock, handlers)
        rss = measure_dispatcher(args, settings, engine, app, log_dir)
    finally:
        client.close()
        engine.dispose()
    report(args, fill_seconds, scans, rss)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once; 0 when it finished, 1 when the stack broke."""
    args = parse_args(argv)
    stop_on_sigterm()
    settings = StoreSettings(namespace=f"scale_{secrets.token_hex(6)}")
    log_dir = Path(tempfile.mkdtemp(prefix=f"kairos-{settings.namespace}-"))
    log(f"namespace {settings.namespace}, service logs in {log_dir}")
    try:
        measure(args, settings, log_dir)
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        drop_namespace(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
