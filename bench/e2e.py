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
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import httpx
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import drop_database, make_engine
from common.db.schema import executions, jobs, workers
from common.namespace import create_app_credentials, prepare_namespace
from common.states import ExecutionStatus
from common.vhost import drop_vhost

REPO = Path(__file__).resolve().parent.parent
WORKER_IDS = ("bench-w1", "bench-w2")
WORKER_CAPACITY = 16
STARTUP_SECONDS = 60.0
STOP_GRACE_SECONDS = 20.0
REQUEST_TIMEOUT_SECONDS = 30.0
LOG_MARKERS = ("WARNING", "ERROR", "CRITICAL", "Traceback")


class BenchError(Exception):
    """The pipeline did not get where the benchmark needs it within its deadline."""


@dataclass
class Service:
    """One ``kairos`` process of the benchmark stack, with its log file."""

    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None


@dataclass
class Submission:
    """What the submitting threads saw."""

    first_post: float = math.inf
    last_answer: float = 0.0
    accepted: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, started: float, answered: float, outcome: str | None) -> None:
        """Add one request: ``outcome`` is None when it was accepted."""
        with self.lock:
            self.first_post = min(self.first_post, started)
            self.last_answer = max(self.last_answer, answered)
            if outcome is None:
                self.accepted += 1
            else:
                self.failures[outcome] = self.failures.get(outcome, 0) + 1


@dataclass(frozen=True)
class Completion:
    """When the poll saw every job done, and the execution counts it saw then."""

    seen_done_at: float
    last_ended_ms: int
    counts: dict[str, int]


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=2000, help="demo.noop jobs to submit")
    parser.add_argument("--clients", type=int, default=16, help="concurrent submitting threads")
    parser.add_argument(
        "--deadline", type=float, default=300.0, help="seconds to wait for all jobs to succeed"
    )
    return parser.parse_args(argv)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def git_commit() -> str:
    """The short hash of HEAD, or ``unknown`` outside a git checkout."""
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def build_services(port: int, log_dir: Path) -> list[Service]:
    """The processes a user would start: api, dispatcher, two workers, notifier."""
    kairos = str(Path(sys.executable).parent / "kairos")
    argvs = {
        "api": [kairos, "api", "--port", str(port)],
        "dispatcher": [kairos, "dispatcher"],
        "notifier": [kairos, "notifier"],
    }
    for worker_id in WORKER_IDS:
        argvs[worker_id] = [kairos, "worker", "--id", worker_id]
        argvs[worker_id] += ["--capacity", str(WORKER_CAPACITY)]
    return [Service(name, argv, log_dir / f"{name}.log") for name, argv in argvs.items()]


def start_services(services: list[Service], env: dict[str, str]) -> None:
    """Start every service in its own session, stdout and stderr to its log file."""
    for service in services:
        service.log_file = service.log_path.open("wb")
        service.process = subprocess.Popen(
            service.argv,
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=service.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log(f"started {service.name} pid {service.process.pid}")


def stop_services(services: list[Service]) -> None:
    """SIGTERM every live service by pid, then SIGKILL what is left after the grace time."""
    for service in services:
        if service.process is not None and service.process.poll() is None:
            service.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for service in services:
        if service.process is None:
            continue
        try:
            service.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"{service.name} ignored SIGTERM for {STOP_GRACE_SECONDS:.0f} s; SIGKILL")
            service.process.kill()
            service.process.wait()
        log(f"{service.name} exited with {service.process.returncode}")
        if service.log_file is not None:
            service.log_file.close()


def check_alive(services: list[Service]) -> None:
    """Raise when a service has exited on its own."""
    for service in services:
        if service.process is not None and service.process.poll() is not None:
            raise BenchError(
                f"{service.name} exited with {service.process.returncode}; see {service.log_path}"
            )


def poll_until(
    what: str, ready: Callable[[], bool], services: list[Service], seconds: float
) -> None:
    """Call ``ready`` every 0.2 s until it is true; raise after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not ready():
        check_alive(services)
        if time.monotonic() > deadline:
            raise BenchError(f"{what} not reached within {seconds:.0f} s")
        time.sleep(0.2)


def api_healthy(base: str) -> bool:
    """True once GET /healthz answers 200."""
    try:
        return httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def workers_registered(engine: Engine) -> bool:
    """True once both benchmark workers have a row in the workers table."""
    query = sa.select(sa.func.count()).where(workers.c.worker_id.in_(WORKER_IDS))
    with engine.connect() as conn:
        return conn.execute(query).scalar_one() == len(WORKER_IDS)


def noop_body(name: str) -> dict[str, Any]:
    """A demo.noop job due now."""
    return {"jobName": name, "jobHandler": "demo.noop", "params": {}}


def submit_warm_up(client: httpx.Client) -> int | None:
    """POST one job; its id once the API knows demo.noop, None while it answers 422."""
    response = client.post("/openapi/jobs", json=noop_body("bench warm-up"))
    if response.status_code == 422:
        return None
    if response.status_code != 202:
        raise BenchError(f"warm-up job answered {response.status_code}: {response.text}")
    job_id: int = response.json()["jobId"]
    return job_id


def job_succeeded(engine: Engine, job_id: int) -> bool:
    """True once one execution of the job has SUCCEEDED."""
    query = sa.select(sa.func.count()).where(
        executions.c.job_id == job_id, executions.c.status == ExecutionStatus.SUCCEEDED
    )
    with engine.connect() as conn:
        return conn.execute(query).scalar_one() > 0


def warm_up(client: httpx.Client, engine: Engine, services: list[Service]) -> int:
    """Run one job through the whole pipeline; return its id (later ids are measured)."""
    warm_id: list[int] = []

    def accepted() -> bool:
        job_id = submit_warm_up(client)
        if job_id is not None:
            warm_id.append(job_id)
        return job_id is not None

    poll_until("warm-up job accepted", accepted, services, STARTUP_SECONDS)
    poll_until("warm-up job SUCCEEDED", lambda: job_succeeded(engine, warm_id[0]), services, 60)
    return warm_id[0]


def submit_share(base: str, headers: dict[str, str], indexes: range, seen: Submission) -> None:
    """One client thread: POST the jobs at ``indexes`` over its own connection."""
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        for index in indexes:
            started = time.time()
            try:
                response = client.post("/openapi/jobs", json=noop_body(f"bench {index}"))
                outcome = None if response.status_code == 202 else f"HTTP {response.status_code}"
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            seen.record(started, time.time(), outcome)


def submit_all(base: str, api_key: str, count: int, clients: int) -> Submission:
    """POST ``count`` jobs from ``clients`` threads, each with its own httpx.Client."""
    seen = Submission()
    headers = {"Authorization": f"Bearer {api_key}"}
    with ThreadPoolExecutor(max_workers=clients, thread_name_prefix="client") as pool:
        futures = [
            pool.submit(submit_share, base, headers, range(i, count, clients), seen)
            for i in range(clients)
        ]
        for future in futures:
            future.result()
    return seen


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


def percentile(values: list[int], fraction: float) -> int:
    """Nearest-rank percentile of sorted ``values``."""
    rank = max(1, math.ceil(fraction * len(values)))
    return values[rank - 1]


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


def scan_logs(services: list[Service]) -> None:
    """Summarise warning, error and traceback lines of every service log on stderr."""
    for service in services:
        if not service.log_path.exists():
            continue
        lines = service.log_path.read_text(errors="replace").splitlines()
        flagged = [line for line in lines if any(m in line for m in LOG_MARKERS)]
        log(f"{service.name}: {len(lines)} log lines, {len(flagged)} warnings/errors")
        for line in flagged[:10]:
            log(f"  {line}")


def drop_namespace(settings: StoreSettings) -> None:
    """Drop the namespace's database, vhost and Redis keys; report, never raise."""
    steps: list[tuple[str, Callable[[StoreSettings], None]]] = [
        ("database", drop_database),
        ("vhost", drop_vhost),
        ("redis keys", drop_redis_keys),
    ]
    for what, drop in steps:
        try:
            drop(settings)
        except Exception as e:
            log(f"could not drop {what} of {settings.namespace}: {e!r}")
    log(f"namespace {settings.namespace} dropped")


def drop_redis_keys(settings: StoreSettings) -> None:
    """Delete every Redis key under ``<namespace>:``."""
    client = redis.Redis.from_url(settings.redis_url)
    try:
        keys = list(client.scan_iter(match=f"{settings.namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@contextmanager
def namespace_stack(settings: StoreSettings, log_dir: Path) -> Iterator[tuple[str, list[Service]]]:
    """Prepare the namespace, start the services; stop them and drop it all on exit."""
    port = free_port()
    services = build_services(port, log_dir)
    env = {**os.environ, "KAIROS_NAMESPACE": settings.namespace}
    try:
        prepare_namespace(settings)
        start_services(services, env)
        yield f"http://127.0.0.1:{port}", services
    finally:
        stop_services(services)
        drop_namespace(settings)
        scan_logs(services)


def measure(
    args: argparse.Namespace, settings: StoreSettings, base: str, services: list[Service]
) -> dict[str, Any]:
    """Warm the pipeline up, submit the jobs, wait for them, and return the figures."""
    api_key = create_app_credentials(settings, "bench").api_key
    engine = make_engine(settings, pool_size=2)
    try:
        poll_until("GET /healthz 200", lambda: api_healthy(base), services, STARTUP_SECONDS)
        poll_until("workers registered", lambda: workers_registered(engine), services, 60)
        headers = {"Authorization": f"Bearer {api_key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=10.0) as client:
            warm_id = warm_up(client, engine, services)
        log(f"pipeline warm (warm-up job {warm_id}); submitting {args.jobs} jobs")
        seen = submit_all(base, api_key, args.jobs, args.clients)
        log(f"submitted: {seen.accepted} accepted, failures {seen.failures or 'none'}")
        done = wait_all_done(engine, warm_id, seen.accepted, services, args.deadline)
        figures = build_figures(args, seen, done, create_to_start_ms(engine, warm_id))
        print_report(seen, done, figures)
        return figures
    finally:
        engine.dispose()


def stop_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so the clean-up in ``finally`` blocks runs."""

    def handle(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once; 0 when every job succeeded, 1 otherwise."""
    args = parse_args(argv)
    stop_on_sigterm()
    settings = StoreSettings(namespace=f"bench_{secrets.token_hex(6)}")
    log_dir = Path(tempfile.mkdtemp(prefix=f"kairos-{settings.namespace}-"))
    log(f"namespace {settings.namespace}, service logs in {log_dir}")
    try:
        with namespace_stack(settings, log_dir) as (base, services):
            measure(args, settings, base, services)
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
