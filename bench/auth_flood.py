"""Failed-authentication flood: one app's latency with and without a flood of bad keys.

It prepares a namespace of its own, serves ``kairos api`` (as bench/api.py does) and a
trivial server that answers everything 429 (bench/refusing_server.py, the control), and
measures ``GET /openapi/jobs?limit=10`` of one good app from ``--clients`` threads in
rounds of three conditions:

- quiet: the good app alone;
- flooded: ``--flood-clients`` threads send unknown API keys to the API (each request a
  new random key, the costliest kind: none is in any cache) from another loopback
  address (127.0.0.2), as fast as the API answers them;
- control: the same flood, aimed at the refusing server instead. What the good app
  loses here is what the flood's own threads and sockets cost the machine, which no
  change inside Kairos can remove; the flooded condition can at best come down to it.

The conditions interleave (their order turns each round), so all see the same machine.
With ``--old-tree DIR`` (a checkout of the code to compare, e.g. ``git archive main |
tar -x -C DIR``) the API of each run serves that code, then this one, ``--runs`` pairs
interleaved, and the medians of each side's runs are printed last.

Per run it prints, per condition, the good app's requests/s and p50/p99 latency (over
all its rounds, and the median of the rounds' p99), the CPU the API process (and the
refusing server) used, and for the flood the answers it got (401 until its address is
throttled, 429 after) and its rate; then one JSON line. It never fails on time, only
when a good request fails.

    .venv/bin/python bench/auth_flood.py
    .venv/bin/python bench/auth_flood.py --old-tree /tmp/kairos-main --runs 3
    .venv/bin/python bench/auth_flood.py --rounds 4 --requests 1000 --failure-limit 0

``--failure-limit 0`` turns the throttle off (KAIROS_AUTH_FAILURE_LIMIT), to see what
the flood costs without it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from api import Timings, api_stack, kairos_argv
from harness import (
    REQUEST_TIMEOUT_SECONDS,
    STARTUP_SECONDS,
    BenchError,
    Service,
    api_healthy,
    bench_namespace,
    free_port,
    git_commit_dirty,
    log,
    poll_until,
    start_services,
    stop_services,
)

from common.config import StoreSettings
from common.handler_patterns import EVERY_HANDLER
from common.namespace import create_app_credentials

FLOOD_ADDRESS = "127.0.0.2"
GOOD_PATH = "/openapi/jobs?limit=10"
CONDITIONS = ("quiet", "flooded", "control")
REFUSING_SERVER = Path(__file__).resolve().parent / "refusing_server.py"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three conditions")
    parser.add_argument("--requests", type=int, default=600, help="good requests per round")
    parser.add_argument("--clients", type=int, default=4, help="threads of the good app")
    parser.add_argument("--flood-clients", type=int, default=8, help="threads of the flood")
    parser.add_argument(
        "--failure-limit",
        type=int,
        default=None,
        help="KAIROS_AUTH_FAILURE_LIMIT for the API (its default when unset; 0: off)",
    )
    parser.add_argument("--old-tree", type=Path, help="a checkout of the code to compare")
    parser.add_argument("--runs", type=int, default=1, help="runs (pairs with --old-tree)")
    return parser.parse_args(argv)


@dataclass
class Seen:
    """What one condition saw over a run's rounds."""

    timings: Timings = field(default_factory=Timings)
    seconds: float = 0.0
    round_p99s: list[float] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    cpu_seconds: dict[str, float] = field(default_factory=dict)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds process ``pid`` has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


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


@contextmanager
def flooding(target: str | None, clients: int, answers: Counter[str]) -> Iterator[None]:
    """``clients`` flood threads aimed at ``target`` (none when it is None) meanwhile."""
    if target is None:
        yield
        return
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=clients, thread_name_prefix="flood")
    floods = [pool.submit(flood_share, target, stop, answers) for _ in range(clients)]
    try:
        yield
    finally:
        stop.set()
        for flood in floods:
            flood.result()
        pool.shutdown()


def measure_condition(
    target: str | None, pids: dict[str, int], seen: Seen, run: tuple[str, str, Any]
) -> None:
    """One round of one condition: the good app's round while ``target`` is flooded;
    adds its timings, the flood's answers and the CPU each of ``pids`` used to ``seen``."""
    base, api_key, args = run
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    began = time.perf_counter()
    with flooding(target, args.flood_clients, seen.answers):
        one = good_round(base, api_key, args)
    seen.seconds += time.perf_counter() - began
    for name, pid in pids.items():
        used = cpu_seconds(pid) - before[name]
        seen.cpu_seconds[name] = seen.cpu_seconds.get(name, 0.0) + used
    seen.timings.add(one)
    seen.round_p99s.append(one.ms(0.99))


def run_rounds(
    run: tuple[str, str, Any], control: str, pids: dict[str, int]
) -> dict[str, dict[str, Any]]:
    """``--rounds`` rounds of the three conditions, their order turning each round;
    the figures of each condition."""
    base, _, args = run
    seen = {name: Seen() for name in CONDITIONS}
    targets = {"quiet": None, "flooded": base, "control": control}
    for n in range(args.rounds):
        order = CONDITIONS[n % 3 :] + CONDITIONS[: n % 3]
        log(f"round {n + 1}/{args.rounds}: {', '.join(order)}")
        for name in order:
            measure_condition(targets[name], pids, seen[name], run)
    return {name: summary(one) for name, one in seen.items()}


def summary(seen: Seen) -> dict[str, Any]:
    """Rate, latency, CPU and flood figures of one condition."""
    requests = len(seen.timings.latencies_us)
    sent = sum(seen.answers.values())
    elapsed = max(seen.seconds, 1e-9)
    return {
        "requests": requests,
        "req_per_s": round(requests / elapsed, 1),
        "p50_ms": seen.timings.ms(0.50),
        "p99_ms": seen.timings.ms(0.99),
        "p99_ms_median_round": statistics.median(seen.round_p99s),
        "failed": seen.timings.failures,
        "cpu_percent": {k: round(100 * v / elapsed) for k, v in seen.cpu_seconds.items()},
        "flood": {"sent": sent, "per_s": round(sent / elapsed, 1), **seen.answers},
    }


def print_run(code: str, figures: dict[str, Any]) -> None:
    """Human-readable lines of one run, then its JSON line."""
    for name in CONDITIONS:
        row = figures[name]
        flood = {k: v for k, v in row["flood"].items() if k not in ("sent", "per_s")}
        print(
            f"{code} {name:8} good app: {row['requests']} requests, {row['req_per_s']} req/s, "
            f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms (median round "
            f"{row['p99_ms_median_round']}), failed: {row['failed'] or 'none'}; "
            f"CPU {row['cpu_percent']}; flood {row['flood']['per_s']}/s {flood or ''}"
        )
    print(json.dumps({"code": code, **figures}), flush=True)


def refusing_service(port: int, log_dir: Path) -> Service:
    """The control: bench/refusing_server.py on ``port``."""
    argv = [sys.executable, str(REFUSING_SERVER), "--port", str(port)]
    return Service("refusing-server", argv, log_dir / "refusing-server.log")


def api_command(tree: Path | None) -> str | None:
    """``kairos api`` serving the code of ``tree`` (this checkout's when None)."""
    if tree is None:
        return None
    return " ".join(["env", f"PYTHONPATH={tree}", *kairos_argv("api")])


def run_once(args: argparse.Namespace, tree: Path | None) -> dict[str, Any]:
    """One run on a fresh namespace: the API (of ``tree``) and the refusing server;
    the figures of its rounds. Raises when a good request failed."""
    settings, log_dir = bench_namespace()
    port = free_port()
    refusing = refusing_service(port, log_dir)
    with api_stack(settings, log_dir, api_command(tree)) as (base, services):
        start_services([refusing], dict(os.environ))
        try:
            figures = measure(settings, base, [*services, refusing], args)
        finally:
            stop_services([refusing])
    return figures


def measure(
    settings: StoreSettings, base: str, services: list[Service], args: Any
) -> dict[str, Any]:
    """Wait for both servers, run the rounds; raise when a good request failed."""
    control = f"http://127.0.0.1:{services[-1].argv[-1]}"
    api_key = create_app_credentials(settings, "bench-good", EVERY_HANDLER).api_key
    poll_until("GET /healthz 200", lambda: api_healthy(base), services, STARTUP_SECONDS)
    poll_until("the refusing server", lambda: refuses(control), services, STARTUP_SECONDS)
    pids = {s.name: s.process.pid for s in services if s.process is not None}
    figures = run_rounds((base, api_key, args), control, pids)
    if any(figures[name]["failed"] for name in CONDITIONS):
        raise BenchError("the good app's requests failed")
    return figures


def refuses(base: str) -> bool:
    """True once the refusing server answers."""
    try:
        return httpx.get(f"{base}/", timeout=1.0).status_code == 429
    except httpx.HTTPError:
        return False


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per condition, the medians over ``runs`` of the good app's p50/p99 and the flood's rate."""
    return {
        name: {
            key: round(statistics.median(run[name][key] for run in runs), 1)
            for key in ("p50_ms", "p99_ms", "p99_ms_median_round", "req_per_s")
        }
        | {"flood_per_s": round(statistics.median(run[name]["flood"]["per_s"] for run in runs))}
        for name in CONDITIONS
    }


def run_all(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """``--runs`` runs of each code, interleaved (the old tree's first in each pair)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    trees = ([args.old_tree] if args.old_tree else []) + [None]
    for n in range(args.runs):
        for tree in trees:
            code = "new" if tree is None else "old"
            log(f"run {n + 1}/{args.runs}: {code} code")
            figures = run_once(args, tree)
            print_run(code, figures)
            runs.setdefault(code, []).append(figures)
    return runs


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every good request was answered 200."""
    args = parse_args(argv)
    if args.failure_limit is not None:
        os.environ["KAIROS_AUTH_FAILURE_LIMIT"] = str(args.failure_limit)
    try:
        runs = run_all(args)
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    summary = {code: medians(found) for code, found in runs.items()}
    for code, figures in summary.items():
        for name, row in figures.items():
            log(f"median of {len(runs[code])} {code} runs, {name}: {row}")
    parameters = {k: getattr(args, k) for k in ("rounds", "requests", "clients", "flood_clients")}
    record = {**parameters, "failure_limit": args.failure_limit, "medians": summary}
    print(json.dumps({**record, "commit": git_commit_dirty()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
