"""What the benchmarks share: a namespace of their own, the real ``kairos`` processes
started as a user would, polls with deadlines, concurrent submission over the OpenAPI,
nearest-rank percentiles, and a clean-up that runs whatever happens.

This module is not run on its own; ``bench/e2e.py`` and ``bench/trigger_lag.py`` import
it (Python puts ``bench/`` first on ``sys.path`` when either is run as a script).
"""

from __future__ import annotations

import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import ensure_database, make_engine, migrate
from common.db.schema import executions, workers
from common.namespace import prepare_namespace
from common.states import ExecutionStatus
from services.stack import DEMO_HANDLERS

REPO = Path(__file__).resolve().parent.parent
# The namespace helpers the benchmarks share with the tests live in tests/stores.py, and
# tests/ is not installed (only common/ and services/ are): it imports from the
# repository root, which a script run as `python bench/x.py` does not have on sys.path.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from tests import stores  # noqa: E402

# The scripts take these from here, where the path above is set.
drop_redis_keys = stores.drop_redis_keys
drop_vhost = stores.drop_vhost
free_port = stores.free_port

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
    """What the submitting threads saw: timings, outcomes, and the ids of accepted jobs."""

    first_post: float = math.inf
    last_answer: float = 0.0
    accepted: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    job_ids: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self, started: float, answered: float, outcome: str | None, job_id: int | None = None
    ) -> None:
        """Add one request: ``outcome`` is None when it was accepted (as ``job_id``)."""
        with self.lock:
            self.first_post = min(self.first_post, started)
            self.last_answer = max(self.last_answer, answered)
            if outcome is None:
                self.accepted += 1
                if job_id is not None:
                    self.job_ids.append(job_id)
            else:
                self.failures[outcome] = self.failures.get(outcome, 0) + 1


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def git_commit() -> str:
    """The short hash of HEAD, or ``unknown`` outside a git checkout."""
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def git_commit_dirty() -> str:
    """The short hash of HEAD, with ``-dirty`` when tracked files differ from it."""
    result = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    return git_commit() + ("-dirty" if result.stdout.strip() else "")


def build_services(port: int, log_dir: Path) -> list[Service]:
    """The processes a user would start: api, dispatcher, two workers, notifier."""
    kairos = str(Path(sys.executable).parent / "kairos")
    argvs = {
        "api": [kairos, "api", "--port", str(port)],
        "dispatcher": [kairos, "dispatcher"],
        "notifier": [kairos, "notifier"],
    }
    for worker_id in WORKER_IDS:
        argvs[worker_id] = [kairos, "worker", "--id", worker_id, "--handlers", DEMO_HANDLERS]
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


def submit_share(
    base: str, headers: dict[str, str], bodies: Sequence[dict[str, Any]], seen: Submission
) -> None:
    """One client thread: POST ``bodies`` one after the other over its own connection."""
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        for body in bodies:
            started = time.time()
            job_id = None
            try:
                response = client.post("/openapi/jobs", json=body)
                outcome = None if response.status_code == 202 else f"HTTP {response.status_code}"
                if outcome is None:
                    job_id = int(response.json()["jobId"])
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            seen.record(started, time.time(), outcome, job_id)


def submit_all(
    base: str, api_key: str, bodies: Sequence[dict[str, Any]], clients: int
) -> Submission:
    """POST every body from ``clients`` threads, each with its own httpx.Client."""
    seen = Submission()
    headers = {"Authorization": f"Bearer {api_key}"}
    with ThreadPoolExecutor(max_workers=clients, thread_name_prefix="client") as pool:
        futures = [
            pool.submit(submit_share, base, headers, bodies[i::clients], seen)
            for i in range(clients)
        ]
        for future in futures:
            future.result()
    return seen


def percentile(values: list[int], fraction: float) -> int:
    """Nearest-rank percentile of sorted ``values``."""
    rank = max(1, math.ceil(fraction * len(values)))
    return values[rank - 1]


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


def print_log_tails(services: list[Service], lines: int = 25) -> None:
    """The last ``lines`` lines of every service log, on stderr."""
    for service in services:
        if not service.log_path.exists():
            continue
        tail = service.log_path.read_text(errors="replace").splitlines()[-lines:]
        log(f"--- last {len(tail)} lines of {service.log_path}")
        for line in tail:
            log(f"  {line}")


def drop_namespace(settings: StoreSettings) -> None:
    """Drop the namespace's database, vhost and Redis keys; report, never raise."""
    steps: list[tuple[str, Callable[[StoreSettings], None]]] = [
        ("database", stores.drop_database),
        ("vhost", drop_vhost),
        ("redis keys", drop_redis_keys),
    ]
    for what, drop in steps:
        try:
            drop(settings)
        except Exception as e:
            log(f"could not drop {what} of {settings.namespace}: {e!r}")
    log(f"namespace {settings.namespace} dropped")


@contextmanager
def namespace_stack(settings: StoreSettings, log_dir: Path) -> Iterator[tuple[str, list[Service]]]:
    """Prepare the namespace, start the services; stop them and drop it all on exit."""
    port = free_port()
    services = build_services(port, log_dir)
    # The per-app rate limit (on by default) would measure itself, not Kairos.
    env = {
        **os.environ,
        "KAIROS_NAMESPACE": settings.namespace,
        "KAIROS_RATE_LIMIT_PER_SECOND": "0",
    }
    try:
        prepare_namespace(settings)
        start_services(services, env)
        yield f"http://127.0.0.1:{port}", services
    finally:
        stop_services(services)
        drop_namespace(settings)
        scan_logs(services)


def stop_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so the clean-up in ``finally`` blocks runs."""

    def handle(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


@contextmanager
def scratch_engine(prefix: str) -> Iterator[Engine]:
    """An engine on a migrated database of its own (``<prefix><random hex>``), dropped
    on leaving: for benchmarks that need MySQL alone."""
    settings = StoreSettings(namespace=prefix + secrets.token_hex(4))
    ensure_database(settings)
    engine = make_engine(settings)
    try:
        migrate(engine)
        yield engine
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE `{settings.namespace}`"))
        engine.dispose()


def bench_namespace() -> tuple[StoreSettings, Path]:
    """A fresh namespace and log folder for one benchmark run; SIGTERM still cleans up."""
    stop_on_sigterm()
    settings = StoreSettings(namespace=f"bench_{secrets.token_hex(6)}")
    log_dir = Path(tempfile.mkdtemp(prefix=f"kairos-{settings.namespace}-"))
    log(f"namespace {settings.namespace}, service logs in {log_dir}")
    return settings, log_dir
