"""One timed Kairos round for ``bench/vs_peers.py``: a fresh stack, N no-op jobs.

The stack is a fresh namespace with ``kairos api``, one ``kairos dispatcher`` and two
``kairos worker --capacity 16``, started as ``bench/harness.py`` does (no notifier: no
job has a callback). After one job has run through, jobs go in through
``POST /openapi/jobs/batch`` (1,000 per request from 4 threads) when ``/openapi.json``
lists that route and a one-job batch of it is accepted, else as single
``POST /openapi/jobs`` from 16 threads. The clock runs from the first POST to the latest
``ended_at`` of the measured SUCCEEDED executions.

``bench/cost.py`` runs the same round in other shapes (``KairosShape``): single POSTs
only, every job calling back to a receiver (a notifier runs then, and the clock stops at
the last ``delivered_at``), and a profiler around the measured window.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from cpu_meter import CpuMeter, per_job_ms
from harness import (
    REQUEST_TIMEOUT_SECONDS,
    STARTUP_SECONDS,
    BenchError,
    Service,
    Submission,
    api_healthy,
    build_services,
    check_alive,
    drop_namespace,
    free_port,
    log,
    noop_body,
    poll_until,
    print_log_tails,
    scan_logs,
    start_services,
    stop_services,
    submit_all,
    warm_up,
    workers_registered,
)
from pipeline import delivered, dispatcher_counter, last_delivery
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.schema import executions, jobs
from common.handler_patterns import EVERY_HANDLER
from common.namespace import create_app_credentials, prepare_namespace
from common.states import ExecutionStatus, JobStatus

from .rounds import RoundFigure

KAIROS_SERVICES = ("api", "dispatcher", "bench-w1", "bench-w2")
BATCH_PATH = "/openapi/jobs/batch"
BATCH_SIZE = 1000
BATCH_CLIENTS = 4
SINGLE_CLIENTS = 16
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class KairosShape:
    """How a round submits and what its jobs do: batches (when the API has them) or
    single POSTs only; no callback, or every job calling back to ``callback_url``; and
    ``profile``, a context around the measured window given the stack's services."""

    single: bool = False
    callback_url: str | None = None
    profile: Callable[[list[Service]], AbstractContextManager[object]] | None = None

    def body(self, name: str) -> dict[str, Any]:
        """One measured job's body."""
        body = noop_body(name)
        return body if self.callback_url is None else {**body, "callbackUrl": self.callback_url}


@dataclass(frozen=True)
class BatchRoute:
    """How the batch route takes its jobs: a bare list, or a list under ``key``."""

    key: str | None
    size: int

    def payload(self, bodies: Sequence[dict[str, Any]]) -> Any:
        """The request body for ``bodies``."""
        return list(bodies) if self.key is None else {self.key: list(bodies)}


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    found: dict[str, Any] = spec["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return found


def batch_route(spec: dict[str, Any]) -> BatchRoute | None:
    """The batch route as ``/openapi.json`` describes it, None when it has none."""
    post = spec.get("paths", {}).get(BATCH_PATH, {}).get("post")
    if post is None:
        return None
    content = post.get("requestBody", {}).get("content", {})
    schema = _resolve(spec, content.get("application/json", {}).get("schema", {}))
    if schema.get("type") == "array":
        return BatchRoute(None, min(BATCH_SIZE, int(schema.get("maxItems", BATCH_SIZE))))
    for name, prop in schema.get("properties", {}).items():
        items = _resolve(spec, prop)
        if items.get("type") == "array":
            return BatchRoute(name, min(BATCH_SIZE, int(items.get("maxItems", BATCH_SIZE))))
    return BatchRoute("jobs", BATCH_SIZE)


def usable_batch_route(client: httpx.Client) -> BatchRoute | None:
    """The batch route if the API lists it and a one-job batch of it is accepted."""
    spec = client.get("/openapi.json")
    spec.raise_for_status()
    route = batch_route(spec.json())
    if route is None:
        log(f"{BATCH_PATH} is not in /openapi.json; single POSTs from {SINGLE_CLIENTS} threads")
        return None
    probe = client.post(BATCH_PATH, json=route.payload([noop_body("bench batch probe")]))
    if not probe.is_success:
        log(f"{BATCH_PATH} probe answered {probe.status_code}: {probe.text[:300]}; single POSTs")
        return None
    log(f"{BATCH_PATH} takes {route.size} jobs per request (list under {route.key!r})")
    return route


def post_batches(
    base: str, headers: dict[str, str], route: BatchRoute, chunks: Sequence[Any], seen: Submission
) -> None:
    """One client thread: POST its share of the batches over its own connection."""
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        for chunk in chunks:
            started = time.time()
            outcome = None
            try:
                response = client.post(BATCH_PATH, json=route.payload(chunk))
                if not response.is_success:
                    outcome = f"HTTP {response.status_code}"
                    log(f"batch answered {response.status_code}: {response.text[:300]}")
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            seen.record(started, time.time(), outcome)


def submit_batches(
    base: str, api_key: str, bodies: Sequence[dict[str, Any]], route: BatchRoute
) -> Submission:
    """POST ``bodies`` in batches of ``route.size`` from ``BATCH_CLIENTS`` threads."""
    chunks = [bodies[i : i + route.size] for i in range(0, len(bodies), route.size)]
    seen = Submission()
    headers = {"Authorization": f"Bearer {api_key}"}
    with ThreadPoolExecutor(max_workers=BATCH_CLIENTS, thread_name_prefix="batch") as pool:
        futures = [
            pool.submit(post_batches, base, headers, route, chunks[i::BATCH_CLIENTS], seen)
            for i in range(BATCH_CLIENTS)
        ]
        for future in futures:
            future.result()
    return seen


@contextmanager
def kairos_stack(
    settings: StoreSettings, log_dir: Path, notifier_metrics: int | None = None
) -> Iterator[tuple[str, list[Service]]]:
    """A fresh namespace with api, dispatcher and two workers (and, given the port of its
    metrics, a notifier, which may then call back to this machine); all of it gone on
    exit."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    notifier = notifier_metrics is not None
    names = (*KAIROS_SERVICES, "notifier") if notifier else KAIROS_SERVICES
    services = [s for s in build_services(port, log_dir) if s.name in names]
    for service in services:
        if service.name == "notifier":
            service.argv += ["--metrics-port", str(notifier_metrics)]
    # The per-app rate limit (on by default) would measure itself, not Kairos.
    env = {
        **os.environ,
        "KAIROS_NAMESPACE": settings.namespace,
        "KAIROS_RATE_LIMIT_PER_SECOND": "0",
    }
    if notifier:
        env["KAIROS_CALLBACK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    try:
        prepare_namespace(settings)
        start_services(services, env)
        yield f"http://127.0.0.1:{port}", services
    except BenchError:
        print_log_tails(services)
        raise
    finally:
        stop_services(services)
        drop_namespace(settings)
        scan_logs(services)


def _scalar(engine: Engine, query: sa.Select[Any]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one() or 0)


def succeeded_query(after_id: int) -> sa.Select[Any]:
    """How many jobs after ``after_id`` SUCCEEDED: a one-shot job does in the transaction
    that records its run's outcome. Counted on the jobs' status index, whose entries
    carry the job id (no row is read), but every entry is: it is counted only to report
    progress and once all jobs have ended."""
    return (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(jobs.c.status == JobStatus.SUCCEEDED, jobs.c.id > after_id)
    )


def unended_query(after_id: int) -> sa.Select[Any]:
    """One job after ``after_id`` still waiting or running, if any: a probe of the jobs'
    status index that reads an entry or two however many jobs have ended."""
    return sa.select(sa.func.count()).select_from(
        sa.select(jobs.c.id)
        # Else MariaDB may walk the primary key from ``after_id``, past every ended job.
        .with_hint(jobs, "FORCE INDEX (ix_jobs_status_updated)")
        .where(jobs.c.status.in_([JobStatus.WAITING, JobStatus.RUNNING]), jobs.c.id > after_id)
        .limit(1)
        .subquery()
    )


def wait_succeeded(
    engine: Engine, after_id: int, expected: int, services: list[Service], seconds: float
) -> None:
    """Poll MySQL until ``expected`` jobs after ``after_id`` SUCCEEDED.

    Polled every ``POLL_SECONDS`` by probing for a job not ended, and counted only once
    none is left (and every 5 s for progress). A count of SUCCEEDED executions at every
    poll was a scan of the executions table each time, and MariaDB's CPU for it was
    charged to the jobs measured: in a round of 10,000, a third of the executions rows
    MariaDB read. ``kairos_outcome`` counts the executions once, at the end.
    """
    deadline = time.monotonic() + seconds
    next_report = time.monotonic() + 5.0
    while True:
        if not _scalar(engine, unended_query(after_id)):
            done = _scalar(engine, succeeded_query(after_id))
            if done >= expected:
                return
        check_alive(services)
        now = time.monotonic()
        if now > deadline:
            done = _scalar(engine, succeeded_query(after_id))
            raise BenchError(f"only {done}/{expected} Kairos jobs SUCCEEDED after {seconds:.0f} s")
        if now >= next_report:
            log(f"kairos: {_scalar(engine, succeeded_query(after_id))}/{expected} SUCCEEDED")
            next_report = now + 5.0
        time.sleep(POLL_SECONDS)


def kairos_outcome(engine: Engine, after_id: int) -> tuple[int, int, int]:
    """Of the jobs after ``after_id``: jobs with a SUCCEEDED run, such runs, last ended_at."""
    measured = (executions.c.job_id > after_id) & (executions.c.status == ExecutionStatus.SUCCEEDED)
    query = sa.select(
        sa.func.count(sa.distinct(executions.c.job_id)),
        sa.func.count(),
        sa.func.max(executions.c.ended_at),
    ).where(measured)
    with engine.connect() as conn:
        row = conn.execute(query).one()
    return int(row[0]), int(row[1]), int(row[2] or 0)


def warm_kairos(
    base: str, api_key: str, engine: Engine, services: list[Service]
) -> tuple[BatchRoute | None, int]:
    """Run a job through, probe the batch route; the route and the last job id so far."""
    poll_until("GET /healthz 200", lambda: api_healthy(base), services, STARTUP_SECONDS)
    poll_until("workers registered", lambda: workers_registered(engine), services, 60)
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        warm_up(client, engine, services)
        route = usable_batch_route(client)
    after_id = _scalar(engine, sa.select(sa.func.max(jobs.c.id)))
    everything = _scalar(engine, sa.select(sa.func.count()).select_from(jobs))
    wait_succeeded(engine, 0, everything, services, 60)
    return route, after_id


def wait_delivered(engine: Engine, expected: int, services: list[Service], seconds: float) -> None:
    """Poll MySQL until ``expected`` callbacks are DELIVERED."""
    deadline = time.monotonic() + seconds
    while (done := delivered(engine)) < expected:
        check_alive(services)
        if time.monotonic() > deadline:
            raise BenchError(f"only {done}/{expected} callbacks DELIVERED after {seconds:.0f} s")
        time.sleep(POLL_SECONDS)


def submit(
    base: str, api_key: str, bodies: list[dict[str, Any]], route: BatchRoute | None
) -> tuple[Submission, str]:
    """Submit ``bodies`` by the batch route when there is one, else single POSTs; what the
    clients saw and how they submitted."""
    if route is not None:
        how = f"batches of {route.size} from {BATCH_CLIENTS} threads"
        return submit_batches(base, api_key, bodies, route), how
    how = f"single POSTs from {SINGLE_CLIENTS} threads"
    return submit_all(base, api_key, bodies, SINGLE_CLIENTS), how


@dataclass(frozen=True)
class Measured:
    """The measured window of a round: what the clients saw, how they submitted, the CPU
    per job, and the jobs done, their runs and the clock's stop (epoch ms)."""

    seen: Submission
    how: str
    cpu: dict[str, float]
    done_jobs: int
    runs: int
    last_ms: int


def measure(
    base: str,
    api_key: str,
    engine: Engine,
    services: list[Service],
    jobs_count: int,
    deadline: float,
    shape: KairosShape,
    index: int,
) -> Measured:
    """Warm the stack up, then submit and wait for every job (and callback), metered."""
    route, after_id = warm_kairos(base, api_key, engine, services)
    route = None if shape.single else route
    bodies = [shape.body(f"peers {i}") for i in range(jobs_count)]
    log(f"kairos round {index} warm; submitting {jobs_count} jobs")
    profile = shape.profile(services) if shape.profile is not None else nullcontext()
    with profile:
        meter = CpuMeter()
        meter.start(services)
        seen, how = submit(base, api_key, bodies, route)
        accepted = _scalar(engine, sa.select(sa.func.count()).where(jobs.c.id > after_id))
        if seen.failures:
            log(f"kairos submit failures: {seen.failures}; {accepted} jobs stored")
        wait_succeeded(engine, after_id, accepted, services, deadline)
        if shape.callback_url is not None:
            wait_delivered(engine, accepted, services, deadline)
        cpu = per_job_ms(meter.stop(), accepted)
    done_jobs, runs, last_ms = kairos_outcome(engine, after_id)
    if shape.callback_url is not None:
        last_ms = last_delivery(engine)
    return Measured(seen, how, cpu, done_jobs, runs, last_ms)


def run_kairos_round(
    jobs_count: int,
    deadline: float,
    run_id: str,
    index: int,
    log_dir: Path,
    shape: KairosShape = KairosShape(),
) -> RoundFigure:
    """Start a fresh Kairos stack, warm it up, time ``jobs_count`` jobs through it."""
    settings = StoreSettings(namespace=f"peers_{run_id}_kairos_{index}")
    metrics = free_port() if shape.callback_url is not None else None
    parked = ""
    with kairos_stack(settings, log_dir / f"kairos-{index}", metrics) as (base, services):
        api_key = create_app_credentials(settings, "bench", EVERY_HANDLER).api_key
        engine = make_engine(settings, pool_size=2)
        try:
            m = measure(base, api_key, engine, services, jobs_count, deadline, shape, index)
        finally:
            engine.dispose()
        if metrics is not None:
            # Each park is one more trip through a retry queue before any attempt.
            deferred = dispatcher_counter(metrics, "kairos_callbacks_deferred_total")
            parked = f"; callbacks parked before an attempt {deferred:.0f} times"
    seconds = m.last_ms / 1000 - m.seen.first_post
    failed = m.seen.failures or "none"
    note = f"{m.how}; {m.runs - m.done_jobs} extra runs; failed requests {failed}{parked}"
    submit_seconds = m.seen.last_answer - m.seen.first_post
    return RoundFigure("kairos", index, m.done_jobs, seconds, submit_seconds, note, m.cpu)
