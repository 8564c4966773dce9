"""Failed-authentication flood: one app's latency with and without a flood of bad keys.

It prepares a namespace of its own, serves ``kairos api`` (as bench/api.py does), and
measures ``GET /openapi/jobs?limit=10`` of one good app from ``--clients`` threads in
rounds that alternate between quiet and flooded. During a flooded round
``--flood-clients`` threads send unknown API keys (each request a new random key, the
costliest kind: none is in any cache) from another loopback address (127.0.0.2), as
fast as the API answers them. Quiet and flooded rounds interleave, so both conditions
see the same machine.

It prints, per condition, the good app's requests/s and p50/p99 latency, and for the
flood the answers it got (401 until its address is throttled, 429 after) and its rate;
then one JSON line. It never fails on time, only when a good request fails.

    .venv/bin/python bench/auth_flood.py
    .venv/bin/python bench/auth_flood.py --rounds 4 --requests 1000 --failure-limit 0

``--failure-limit 0`` turns the throttle off (KAIROS_AUTH_FAILURE_LIMIT), to see what
the flood costs without it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from api import Timings, api_stack
from harness import (
    REQUEST_TIMEOUT_SECONDS,
    STARTUP_SECONDS,
    BenchError,
    Service,
    api_healthy,
    bench_namespace,
    git_commit_dirty,
    log,
    poll_until,
)

from common.config import StoreSettings
from common.handler_patterns import EVERY_HANDLER
from common.namespace import create_app_credentials

FLOOD_ADDRESS = "127.0.0.2"
GOOD_PATH = "/openapi/jobs?limit=10"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="quiet/flooded pairs")
    parser.add_argument("--requests", type=int, default=600, help="good requests per round")
    parser.add_argument("--clients", type=int, default=4, help="threads of the good app")
    parser.add_argument("--flood-clients", type=int, default=8, help="threads of the flood")
    parser.add_argument(
        "--failure-limit",
        type=int,
        default=None,
        help="KAIROS_AUTH_FAILURE_LIMIT for the API (its default when unset; 0: off)",
    )
    return parser.parse_args(argv)


def get_share(base: str, api_key: str, count: int) -> Timings:
    """One good client thread: ``count`` GETs over its own connection."""
    seen = Timings()
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        for _ in range(count):
            started = time.perf_counter()
            try:
                status = client.get(GOOD_PATH).status_code
                outcome = None if status == 200 else f"HTTP {status}"
            except httpx.HTTPError as e:
                outcome = type(e).__name__
            seen.latencies_us.append(int((time.perf_counter() - started) * 1_000_000))
            if outcome is not None:
                seen.failures[outcome] = seen.failures.get(outcome, 0) + 1
    return seen


def good_round(base: str, api_key: str, args: argparse.Namespace) -> Timings:
    """The good app's requests of one round, from ``--clients`` threads."""
    total = Timings(started=time.perf_counter())
    share = max(1, args.requests // args.clients)
    with ThreadPoolExecutor(max_workers=args.clients, thread_name_prefix="good") as pool:
        for future in [pool.submit(get_share, base, api_key, share) for _ in range(args.clients)]:
            total.add(future.result())
    total.ended = time.perf_counter()
    return total


def flood_share(base: str, stop: threading.Event, answers: Counter[str]) -> None:
    """One flood thread: a new unknown key per request until ``stop``."""
    transport = httpx.HTTPTransport(local_address=FLOOD_ADDRESS)
    with httpx.Client(base_url=base, transport=transport, timeout=REQUEST_TIMEOUT_SECONDS) as c:
        while not stop.is_set():
            headers = {"Authorization": f"Bearer flood-{secrets.token_hex(16)}"}
            try:
                answers[str(c.get(GOOD_PATH, headers=headers).status_code)] += 1
            except httpx.HTTPError as e:
                answers[type(e).__name__] += 1


def flooded_round(
    base: str, api_key: str, args: argparse.Namespace, answers: Counter[str]
) -> tuple[Timings, float]:
    """A good round while ``--flood-clients`` threads flood; its timings and how long
    the flood ran."""
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=args.flood_clients, thread_name_prefix="flood")
    began = time.perf_counter()
    floods = [pool.submit(flood_share, base, stop, answers) for _ in range(args.flood_clients)]
    try:
        timings = good_round(base, api_key, args)
    finally:
        stop.set()
        for flood in floods:
            flood.result()
        pool.shutdown()
    return timings, time.perf_counter() - began


def summary(timings: Timings, requests: int) -> dict[str, Any]:
    """Rate and latency figures of one condition."""
    return {
        "requests": requests,
        "req_per_s": round(requests / max(timings.seconds(), 1e-9), 1),
        "p50_ms": timings.ms(0.50),
        "p99_ms": timings.ms(0.99),
        "failed": timings.failures,
    }


def run_rounds(base: str, api_key: str, args: argparse.Namespace) -> dict[str, Any]:
    """Alternate quiet and flooded rounds; the figures of both conditions and the flood."""
    quiet, flooded = Timings(), Timings()
    answers: Counter[str] = Counter()
    quiet_s = flooded_s = flood_s = 0.0
    for n in range(args.rounds):
        log(f"round {n + 1}/{args.rounds}: quiet, then flooded")
        one = good_round(base, api_key, args)
        quiet.add(one)
        quiet_s += one.seconds()
        two, ran = flooded_round(base, api_key, args, answers)
        flooded.add(two)
        flooded_s += two.seconds()
        flood_s += ran
    quiet.ended, flooded.ended = quiet_s, flooded_s
    sent = sum(answers.values())
    return {
        "quiet": summary(quiet, len(quiet.latencies_us)),
        "flooded": summary(flooded, len(flooded.latencies_us)),
        "flood": {"sent": sent, "per_s": round(sent / max(flood_s, 1e-9), 1), **answers},
        "failure_limit": args.failure_limit,
        "commit": git_commit_dirty(),
    }


def print_report(figures: dict[str, Any]) -> None:
    """Human-readable lines, then the JSON line last."""
    for name in ("quiet", "flooded"):
        row = figures[name]
        print(
            f"{name:8} good app: {row['requests']} requests, {row['req_per_s']} req/s, "
            f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, failed: {row['failed'] or 'none'}"
        )
    flood = figures["flood"]
    answers = {k: v for k, v in flood.items() if k not in ("sent", "per_s")}
    print(f"flood:   {flood['sent']} bad keys, {flood['per_s']} req/s, answers {answers}")
    print(json.dumps(figures), flush=True)


def measure(settings: StoreSettings, base: str, services: list[Service], args: Any) -> None:
    """Wait for the API, run the rounds, print; raise when a good request failed."""
    api_key = create_app_credentials(settings, "bench-good", EVERY_HANDLER).api_key
    poll_until("GET /healthz 200", lambda: api_healthy(base), services, STARTUP_SECONDS)
    figures = run_rounds(base, api_key, args)
    print_report(figures)
    if figures["quiet"]["failed"] or figures["flooded"]["failed"]:
        raise BenchError("the good app's requests failed")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once; 0 when every good request was answered 200."""
    args = parse_args(argv)
    if args.failure_limit is not None:
        os.environ["KAIROS_AUTH_FAILURE_LIMIT"] = str(args.failure_limit)
    settings, log_dir = bench_namespace()
    try:
        with api_stack(settings, log_dir, None) as (base, services):
            measure(settings, base, services, args)
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
