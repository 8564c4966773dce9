"""Several of each process on one namespace, no fault at all: how many store conflicts,
duplicate callback POSTs, duplicate side effects and consumer restarts.

It prepares a namespace of its own, starts two ``kairos api``, two ``kairos
dispatcher``, four ``kairos worker`` and two ``kairos notifier`` (``tests/e2e/several.py``),
submits ``--jobs`` one-shot jobs due now from ``--clients`` threads spread over both APIs
(every third with a callback), waits until every job SUCCEEDED and every callback was
DELIVERED, and prints the counts and, last, one JSON line. Processes are stopped and the
namespace dropped whatever happens.

    .venv/bin/python bench/several_of_each.py --jobs 6000 --clients 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import sqlalchemy as sa
from harness import REPO, bench_namespace, drop_namespace, log
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from common.config import StoreSettings
from common.db.engine import make_engine
from common.namespace import prepare_namespace
from tests.e2e.harness import Processes
from tests.e2e.several import CountingReceiver, Shape, Stack, job_bodies, start_stack, submit

ENV = {
    "KAIROS_HEARTBEAT_SECONDS": "0.5",
    "KAIROS_HEARTBEAT_STALE_MS": "2500",
    "KAIROS_LEASE_TTL_MS": "1500",
    "KAIROS_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: how many jobs, from how many client threads."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--shape", default="2,2,4,2", help="APIs,dispatchers,workers,notifiers")
    return parser.parse_args(argv)


def figures(stack: Stack, receiver: CountingReceiver, settled: bool) -> dict[str, object]:
    """What the run came to, for the report and the JSON line."""
    ledger = stack.ledger()
    return {
        "settled": settled,
        "callbacks": len(receiver.posts),
        "callbacks_posted_twice": len(receiver.twice()),
        "effects_twice": len(ledger.duplicated()),
        "conflict_log_lines": stack.conflict_lines(),
        "conflicts_counted": stack.conflicts_counted(),
        "restart_log_lines": stack.restart_lines(),
    }


def settled(engine: Engine, job_ids: list[int], callbacks: int) -> bool:
    """Every job SUCCEEDED and every callback DELIVERED (two counts: the full books of
    thousands of jobs take minutes to read on a loaded machine)."""
    low, high = min(job_ids), max(job_ids)
    with engine.connect() as conn:
        done = conn.execute(
            sa.text(
                "SELECT COUNT(*) FROM jobs WHERE id BETWEEN :a AND :b AND status = 'SUCCEEDED'"
            ),
            {"a": low, "b": high},
        ).scalar_one()
        delivered = conn.execute(
            sa.text("SELECT COUNT(*) FROM callback_deliveries WHERE status = 'DELIVERED'")
        ).scalar_one()
    return int(done) >= len(job_ids) and int(delivered) >= callbacks


def settle(engine: Engine, job_ids: list[int], callbacks: int, timeout: float) -> bool:
    """Poll until ``settled`` or the time runs out; a read that fails is read again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if settled(engine, job_ids, callbacks):
                return True
        except OperationalError as e:
            log(f"reading the counts failed ({e.orig}); reading again")
        time.sleep(1.0)
    return False


def measure(args: argparse.Namespace, settings: StoreSettings, processes: Processes) -> None:
    """Start the stack, submit, wait for the books, print the figures."""
    receiver = CountingReceiver()
    engine = make_engine(settings, pool_size=2)
    try:
        stack = start_stack(processes, Shape(*(int(n) for n in args.shape.split(","))))
        began = time.monotonic()
        job_ids = submit(stack.apis, job_bodies(args.jobs, receiver.url), args.clients)
        log(f"{len(job_ids)} jobs submitted in {time.monotonic() - began:.1f} s")
        callbacks = len(range(0, args.jobs, 3))
        done = settle(engine, job_ids, callbacks, args.timeout)
        log(f"settled: {done}, {time.monotonic() - began:.1f} s after the first POST")
        found = figures(stack, receiver, done)
        for key, value in found.items():
            log(f"{key}: {value}")
        print(json.dumps(found))
    finally:
        engine.dispose()
        receiver.close()


def main(argv: list[str] | None = None) -> int:
    """Run the scenario once; 0 when the books added up."""
    args = parse_args(argv)
    settings, log_dir = bench_namespace()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(ENV, KAIROS_NAMESPACE=settings.namespace, PYTHONPATH=str(REPO))
    processes = Processes(env, log_dir)
    try:
        prepare_namespace(settings)
        measure(args, settings, processes)
    finally:
        processes.stop_all()
        drop_namespace(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
