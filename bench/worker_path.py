"""The CPU a worker spends on one no-op run outside the broker, in one process.

Reads dispatch packs of 50 executions (``DispatchPacking``), admits them in batches of a
worker's capacity (the take script on a real Redis), runs ``demo.noop`` through
``ExecutionRunner.execute`` (run log, metrics, result) and reports each batch (the
store script, the results message), as a worker's connection thread and pool do minus
the broker and the thread hand-offs. Prints CPU microseconds per run (this process's
user plus system time, so Redis's own work is not in it).

    .venv/bin/python bench/worker_path.py --jobs 10000

To compare two trees, run each tree's interpreter on this file in turn (it uses only
the worker's public classes), several times interleaved. The last line printed is one
JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time

import redis

from common.clock import ClusterClock
from common.keys import RedisKeys
from services.worker.log_writer import RunLogWriter
from services.worker.packs import DispatchPacking
from services.worker.registry import collect_handlers
from services.worker.runner import ExecutionRunner

PACK = 50


def dispatch_body(namespace: str, first: int, now_ms: int) -> bytes:
    """A dispatch pack of ``PACK`` no-op executions, as the dispatcher sends it."""
    executions = [
        {
            "v": 1,
            "execution_id": f"{namespace}-{n}",
            "job_id": n,
            "attempt": 1,
            "trigger_time": now_ms,
            "handler": "demo.noop",
            "params": {},
            "dispatched_at": now_ms,
            "ref": n,
            "app": 1,
        }
        for n in range(first, first + PACK)
    ]
    return json.dumps({"v": 1, "executions": executions}).encode()


def run_batches(runner: ExecutionRunner, bodies: list[bytes], capacity: int) -> None:
    """Unpack, admit, run and report every execution of ``bodies``."""
    packing = DispatchPacking()
    for body in bodies:
        units = packing.unpack(body)
        for start in range(0, len(units), capacity):
            admitted = runner.admit(units[start : start + capacity])
            if not runner.report([runner.execute(a) for a in admitted]):
                raise AssertionError("a batch of runs reported no results message")


def main() -> None:
    """Measure, print the figures, and delete the Redis keys the runs took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=10_000, help="runs, in packs of 50")
    parser.add_argument("--capacity", type=int, default=16, help="runs admitted at once")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis_url)
    namespace = "bench-worker-path-" + secrets.token_hex(4)
    handlers = dict(collect_handlers(["services.worker.demo"]))
    writer = RunLogWriter(lambda lines: None, 65_536)
    keys = RedisKeys(namespace)
    runner = ExecutionRunner(
        "bench-w", handlers, client, keys, ClusterClock(client), 600, run_logs=writer
    )
    now_ms = int(time.time() * 1000)
    bodies = [dispatch_body(namespace, n, now_ms) for n in range(0, args.jobs, PACK)]
    began_cpu, began = time.process_time(), time.perf_counter()
    run_batches(runner, bodies, args.capacity)
    cpu_s, wall_s = time.process_time() - began_cpu, time.perf_counter() - began
    for chunk in client.scan_iter(match=f"{namespace}:*", count=1000):
        client.delete(chunk)
    figures = {"jobs": args.jobs, "cpu_us_per_run": round(cpu_s * 1e6 / args.jobs, 2)}
    print(f"{args.jobs} runs: {figures['cpu_us_per_run']} CPU us a run, {wall_s:.2f} s")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
