"""API benchmark: ``kairos api`` alone, single creates and batch creates.

It prepares a namespace of its own (``bench_<random hex>``), runs one ``kairos worker``
just long enough to register the demo handlers, then serves ``kairos api`` with no
dispatcher, so the submitted jobs (``demo.noop``, due in one hour) only accumulate.
It measures

- single creates: ``--requests`` POST /openapi/jobs from ``--clients`` threads, each
  with its own ``httpx.Client``: requests/s and p50/p99 latency (each with its own
  clientRequestId under ``--client-request-ids``);
- batch creates: ``--batches`` POST /openapi/jobs/batch of ``--batch-size`` jobs from
  ``--batch-clients`` threads: jobs/s and p50/p99 latency per batch;

and prints human lines, then one JSON line last. Processes are stopped and the
namespace dropped whatever happens. It never fails on time, only when a request fails.

Needs MySQL, Redis and RabbitMQ (with its management API) on 127.0.0.1. Run it from
the repository root:

    .venv/bin/python bench/api.py
    .venv/bin/python bench/api.py --requests 2000 --clients 8 --batches 10

``--api-command`` serves the API with another command (``--port N`` is appended), to
compare server settings on the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from harness import (
    REQUEST_TIMEOUT_SECONDS,
    STARTUP_SECONDS,
    BenchError,
    Service,
    api_healthy,
    bench_namespace,
    drop_namespace,
    free_port,
    git_commit_dirty,
    log,
    noop_body,
    percentile,
    poll_until,
    scan_logs,
    start_services,
    stop_services,
)

from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.schema import workers
from common.handler_patterns import EVERY_HANDLER
from common.namespace import create_app_credentials, prepare_namespace
from services.stack import DEMO_HANDLERS

WORKER_ID = "bench-api-w1"
DUE_IN_MS = 3_600_000


@dataclass
class Timings:
    """What the threads of one phase saw: latency per request (µs) and failures."""

    started: float = 0.0
    ended: float = 0.0
    latencies_us: list[int] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    def add(self, other: Timings) -> None:
        """Merge one thread's timings into these."""
        self.latencies_us += other.latencies_us
        for outcome, count in other.failures.items():
            self.failures[outcome] = self.failures.get(outcome, 0) + count

    def seconds(self) -> float:
        """Wall time of the phase."""
        return self.ended - self.started

    def ms(self, fraction: float) -> float:
        """Nearest-rank percentile latency in ms."""
        return round(percentile(sorted(self.latencies_us), fraction) / 1000, 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=5000, help="single creates")
    parser.add_argument("--clients", type=int, default=16, help="threads for single creates")
    parser.add_argument("--batches", type=int, default=20, help="batch creates")
    parser.add_argument("--batch-size", type=int, default=1000, help="jobs per batch")
    parser.add_argument("--batch-clients", type=int, default=4, help="threads for batches")
    parser.add_argument("--warm-up", type=int, default=200, help="single creates not measured")
    parser.add_argument(
        "--client-request-ids",
        action="store_true",
        help="give every single create a clientRequestId of its own",
    )
    parser.add_argument(
        "--api-command",
        default=None,
        help="serve the API with this command instead of `kairos api` (--port N appended)",
    )
    return parser.parse_args(argv)


def kairos_argv(*args: str) -> list[str]:
    """The ``kairos`` console script of this interpreter's environment, with ``args``."""
    return [str(Path(sys.executable).parent / "kairos"), *args]


def api_service(command: str | None, port: int, log_dir: Path) -> Service:
    """``kairos api`` on ``port`` (or ``command --port port``)."""
    argv = shlex.split(command) if command else kairos_argv("api")
    return Service("api", [*argv, "--port", str(port)], log_dir / "api.log")


def worker_service(log_dir: Path) -> Service:
    """One worker, run only to register the demo handlers in the workers table."""
    argv = kairos_argv("worker", "--id", WORKER_ID, "--capacity", "1", "--handlers", DEMO_HANDLERS)
    return Service(WORKER_ID, argv, log_dir / f"{WORKER_ID}.log")


@contextmanager
def api_stack(
    settings: StoreSettings, log_dir: Path, api_command: str | None
) -> Iterator[tuple[str, list[Service]]]:
    """Prepare the namespace, register the handlers, serve the API; clean up on exit."""
    port = free_port()
    worker = worker_service(log_dir)
    services = [worker, api_service(api_command, port, log_dir)]
    # The per-app rate limit (on by default) would measure itself, not Kairos.
    env = {
        **os.environ,
        "KAIROS_NAMESPACE": settings.namespace,
        "KAIROS_RATE_LIMIT_PER_SECOND": "0",
    }
    try:
        prepare_namespace(settings)
        start_services(services, env)
        register_handlers(settings, worker, services)
        yield f"http://127.0.0.1:{port}", services[1:]
    finally:
        stop_services([s for s in services if s.process and s.process.poll() is None])
        drop_namespace(settings)
        scan_logs(services)


def register_handlers(settings: StoreSettings, worker: Service, services: list[Service]) -> None:
    """Wait for the worker's row (its handlers stay registered), then stop the worker."""
    engine = make_engine(settings, pool_size=1)
    query = sa.select(sa.func.count()).where(workers.c.worker_id == WORKER_ID)

    def registered() -> bool:
        with engine.connect() as conn:
            return conn.execute(query).scalar_one() == 1

    try:
        poll_until("worker registered", registered, services, STARTUP_SECONDS)
    finally:
        engine.dispose()
    stop_services([worker])


def later_body(name: str) -> dict[str, Any]:
    """A demo.noop job due in one hour, so nothing would run it during the benchmark."""
    return {**noop_body(name), "triggerAt": int(time.time() * 1000) + DUE_IN_MS}


def post_share(
    base: str, headers: dict[str, str], path: str, bodies: Sequence[dict[str, Any]]
) -> Timings:
    """One client thread: POST ``bodies`` one after the other over its own connection."""
    seen = Timings()
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        for body in bodies:
            started = time.perf_counter()
            try:
                response = client.post(path, json=body)
                outcome = None if response.status_code == 202 else f"HTTP {response.status_code}"
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            seen.latencies_us.append(int((time.perf_counter() - started) * 1_000_000))
            if outcome is not None:
                seen.failures[outcome] = seen.failures.get(outcome, 0) + 1
    return seen


def post_all(
    base: str, api_key: str, path: str, bodies: Sequence[dict[str, Any]], clients: int
) -> Timings:
    """POST every body to ``path`` from ``clients`` threads; the phase's timings."""
    headers = {"Authorization": f"Bearer {api_key}"}
    total = Timings(started=time.perf_counter())
    with ThreadPoolExecutor(max_workers=clients, thread_name_prefix="client") as pool:
        futures = [
            pool.submit(post_share, base, headers, path, bodies[i::clients]) for i in range(clients)
        ]
        for future in futures:
            total.add(future.result())
    total.ended = time.perf_counter()
    return total


def wait_accepting(base: str, api_key: str, services: list[Service]) -> None:
    """Poll until a create is accepted (the API re-reads the handlers every few seconds)."""
    headers = {"Authorization": f"Bearer {api_key}"}

    def accepted() -> bool:
        body = later_body("warm-up")
        response = httpx.post(f"{base}/openapi/jobs", json=body, headers=headers, timeout=5.0)
        if response.status_code not in (202, 422):
            raise BenchError(f"warm-up job answered {response.status_code}: {response.text}")
        return response.status_code == 202

    poll_until("a create accepted", accepted, services, STARTUP_SECONDS)


def measure_single(args: argparse.Namespace, base: str, api_key: str) -> Timings:
    """Warm the API up, then time ``--requests`` single creates."""
    warm = [later_body(f"warm-up {i}") for i in range(args.warm_up)]
    post_all(base, api_key, "/openapi/jobs", warm, args.clients)
    bodies = [later_body(f"single {i}") for i in range(args.requests)]
    if args.client_request_ids:
        bodies = [{**body, "clientRequestId": f"single-{i}"} for i, body in enumerate(bodies)]
    log(f"single creates: {args.requests} from {args.clients} clients")
    return post_all(base, api_key, "/openapi/jobs", bodies, args.clients)


def measure_batches(args: argparse.Namespace, base: str, api_key: str) -> Timings:
    """Time ``--batches`` batch creates of ``--batch-size`` jobs."""
    size = args.batch_size
    batches = [
        {"jobs": [later_body(f"batch {b} item {i}") for i in range(size)]}
        for b in range(args.batches)
    ]
    log(f"batch creates: {args.batches} x {size} jobs from {args.batch_clients} clients")
    return post_all(base, api_key, "/openapi/jobs/batch", batches, args.batch_clients)


def build_figures(args: argparse.Namespace, single: Timings, batch: Timings) -> dict[str, Any]:
    """The JSON figures of one run."""
    return {
        "single": {
            "clients": args.clients,
            "requests": args.requests,
            "client_request_ids": args.client_request_ids,
            "req_per_s": round(args.requests / single.seconds(), 1),
            "p50_ms": single.ms(0.50),
            "p99_ms": single.ms(0.99),
        },
        "batch": {
            "batch_size": args.batch_size,
            "batches": args.batches,
            "jobs_per_s": round(args.batches * args.batch_size / batch.seconds(), 1),
            "p50_ms": batch.ms(0.50),
            "p99_ms": batch.ms(0.99),
        },
        "commit": git_commit_dirty(),
    }


def print_report(single: Timings, batch: Timings, figures: dict[str, Any]) -> None:
    """Human-readable lines, then the JSON line last."""
    one, many = figures["single"], figures["batch"]
    print(f"single creates:  {one['requests']} from {one['clients']} clients")
    print(f"                 {single.seconds():.2f} s, {one['req_per_s']} req/s")
    print(f"                 p50 {one['p50_ms']} ms, p99 {one['p99_ms']} ms")
    print(f"                 failed: {single.failures or 'none'}")
    print(f"batch creates:   {many['batches']} x {many['batch_size']} jobs")
    print(f"                 {batch.seconds():.2f} s, {many['jobs_per_s']} jobs/s")
    print(f"                 p50 {many['p50_ms']} ms, p99 {many['p99_ms']} ms per batch")
    print(f"                 failed: {batch.failures or 'none'}")
    print(json.dumps(figures), flush=True)


def measure(
    args: argparse.Namespace, settings: StoreSettings, base: str, services: list[Service]
) -> dict[str, Any]:
    """Run both phases once the API accepts jobs; raise when a request failed."""
    api_key = create_app_credentials(settings, "bench", EVERY_HANDLER).api_key
    poll_until("GET /healthz 200", lambda: api_healthy(base), services, STARTUP_SECONDS)
    wait_accepting(base, api_key, services)
    single = measure_single(args, base, api_key)
    batch = measure_batches(args, base, api_key)
    figures = build_figures(args, single, batch)
    print_report(single, batch, figures)
    if single.failures or batch.failures:
        raise BenchError(f"failed requests: {single.failures} {batch.failures}")
    return figures


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once; 0 when every request was accepted, 1 otherwise."""
    args = parse_args(argv)
    settings, log_dir = bench_namespace()
    try:
        with api_stack(settings, log_dir, args.api_command) as (base, services):
            measure(args, settings, base, services)
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
