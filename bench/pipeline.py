"""Pipeline throughput: N no-op jobs already due in MySQL, 1 dispatcher, 2 workers.

Starts ``kairos dispatcher`` and two ``kairos worker`` processes (capacity 16) on a
namespace of its own, waits until the dispatcher leads and both workers are live,
then commits N due ``demo.noop`` jobs in multi-row INSERTs, wakes the dispatcher, and
times from that commit to the last SUCCEEDED execution (``ended_at``, cluster clock).
Every guarantee stays on: persistent messages committed to the broker, every
execution and result written to MySQL.

    .venv/bin/python bench/pipeline.py --jobs 20000

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import redis
import sqlalchemy as sa
from harness import (
    WORKER_CAPACITY,
    WORKER_IDS,
    BenchError,
    Service,
    bench_namespace,
    drop_namespace,
    git_commit_dirty,
    log,
    poll_until,
    print_log_tails,
    scan_logs,
    start_services,
    stop_services,
    workers_registered,
)
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.schema import executions, jobs
from common.keys import RedisKeys
from common.namespace import create_app_credentials, prepare_namespace
from services.stack import DEMO_HANDLERS

INSERT_CHUNK = 5_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds to wait")
    return parser.parse_args(argv)


def pipeline_services(log_dir: Path) -> list[Service]:
    """One dispatcher and the benchmark's two workers."""
    kairos = str(Path(sys.executable).parent / "kairos")
    argvs = {"dispatcher": [kairos, "dispatcher"]}
    for worker_id in WORKER_IDS:
        argvs[worker_id] = [kairos, "worker", "--id", worker_id, "--capacity"]
        argvs[worker_id] += [str(WORKER_CAPACITY), "--handlers", DEMO_HANDLERS]
    return [Service(name, argv, log_dir / f"{name}.log") for name, argv in argvs.items()]


def insert_due_jobs(engine: Engine, app_pk: int, count: int, now_ms: int) -> None:
    """Commit ``count`` demo.noop jobs due now, in multi-row INSERTs, one transaction."""
    row = {
        "app_id": app_pk,
        "job_name": "bench",
        "handler": "demo.noop",
        "params": "{}",
        "next_trigger_time": now_ms,
        "status": "WAITING",
        "version": 0,
        "created_at": now_ms,
        "updated_at": now_ms,
    }
    with engine.begin() as conn:
        for start in range(0, count, INSERT_CHUNK):
            conn.execute(jobs.insert(), [row] * min(INSERT_CHUNK, count - start))


def succeeded(engine: Engine) -> int:
    """How many executions have SUCCEEDED."""
    query = sa.select(sa.func.count()).where(executions.c.status == "SUCCEEDED")
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def last_end(engine: Engine) -> int:
    """The latest ``ended_at`` of any execution."""
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.max(executions.c.ended_at))).scalar_one())


def wait_all_done(engine: Engine, count: int, services: list[Service], deadline: float) -> None:
    """Poll until ``count`` executions SUCCEEDED, with a progress line every second."""
    started = time.monotonic()
    while (done := succeeded(engine)) < count:
        if time.monotonic() - started > deadline:
            raise BenchError(f"only {done}/{count} SUCCEEDED after {deadline:.0f} s")
        poll_until("services alive", lambda: True, services, 1)
        log(f"{done}/{count} succeeded")
        time.sleep(1.0)


def run(settings: StoreSettings, count: int, log_dir: Path, deadline: float) -> dict[str, object]:
    """Start the pipeline, load it, and time it."""
    prepare_namespace(settings)
    create_app_credentials(settings, "bench")
    engine = make_engine(settings)
    services = pipeline_services(log_dir)
    client = redis.Redis.from_url(settings.redis_url)
    keys = RedisKeys(settings.namespace)
    try:
        start_services(services, {**os.environ, "KAIROS_NAMESPACE": settings.namespace})
        poll_until("workers registered", lambda: workers_registered(engine), services, 60)
        poll_until(
            "dispatcher leads", lambda: bool(client.get(keys.dispatcher_lease)), services, 60
        )
        time.sleep(1.0)  # the dispatcher's view of live workers refreshes every 0.5 s
        with engine.connect() as conn:
            app_pk = int(conn.execute(sa.text("SELECT id FROM apps")).scalar_one())
        clock = ClusterClock(client)
        begin = clock.now_ms()
        insert_due_jobs(engine, app_pk, count, begin)
        committed = clock.now_ms()
        client.lpush(keys.wake, 1)
        log(f"{count} due jobs committed in {committed - begin} ms")
        wait_all_done(engine, count, services, deadline)
        elapsed_ms = last_end(engine) - committed
        return {
            "jobs": count,
            "insert_ms": committed - begin,
            "elapsed_s": round(elapsed_ms / 1000, 3),
            "jobs_per_s": round(count / (elapsed_ms / 1000), 1),
            "commit": git_commit_dirty(),
        }
    except BenchError:
        print_log_tails(services)
        raise
    finally:
        stop_services(services)
        scan_logs(services)
        engine.dispose()
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once and print its figures."""
    args = parse_args(argv)
    settings, log_dir = bench_namespace()
    try:
        figures = run(settings, args.jobs, log_dir, args.deadline)
    except BenchError as e:
        log(f"failed: {e}")
        return 1
    finally:
        drop_namespace(settings)
    print(f"{figures['jobs']} jobs in {figures['elapsed_s']} s: {figures['jobs_per_s']} jobs/s")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
