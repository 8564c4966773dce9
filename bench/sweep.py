"""Dead-worker sweep cost: what gone workers cost the leader's once-a-second sweep.

It prepares a namespace of its own (``bench_<random hex>``), writes ``--workers`` worker
rows whose last heartbeat is two hours old, each with its (empty) queue declared and no
consumer, as worker ids that change on every restart leave behind. Then it times
``Rescue.rescue_dead_workers`` in this process, as the leading dispatcher runs it:

1. ``--sweeps`` sweeps with forgetting off (``KAIROS_FORGET_WORKERS_AFTER_HOURS=0``):
   every gone worker costs each sweep a broker round trip and a query;
2. sweeps with forgetting on (one hour): the first ones forget them, ``FORGET_PER_SWEEP``
   at a time, then ``--sweeps`` more.

Last comes one JSON line:

    {"workers", "sweep_ms": {"kept": {"p50", "max"}, "forgetting": {"p50", "max"},
     "forgotten": {"p50", "max"}}, "commit"}

The namespace is dropped whatever happens. Needs MySQL, Redis and RabbitMQ (with its
management API) on 127.0.0.1. Run it from the repository root:

    .venv/bin/python bench/sweep.py --workers 200
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable

import redis
from harness import bench_namespace, drop_namespace, git_commit_dirty, log

from common.broker import BatchPublisher, connect
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.workers import Heartbeat, MySqlWorkerTransactions
from common.loadbalance import WorkerChooser
from common.namespace import prepare_namespace
from common.states import WorkerState
from common.stores import Stores
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.routing.route import Router
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.upkeep.rescue import FORGET_PER_SWEEP, Rescue, RescueSettings

TWO_HOURS_MS = 2 * 3_600_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--sweeps", type=int, default=10)
    return parser.parse_args(argv)


def timed(sweep: Callable[[], None], times: int) -> list[float]:
    """Milliseconds each of ``times`` calls took."""
    taken = []
    for _ in range(times):
        began = time.perf_counter()
        sweep()
        taken.append((time.perf_counter() - began) * 1000)
    return taken


def summary(values: list[float]) -> dict[str, float]:
    """Median and maximum, rounded."""
    return {"p50": round(statistics.median(values), 1), "max": round(max(values), 1)}


def measure(settings: StoreSettings, workers: int, sweeps: int) -> dict[str, object]:
    """Fill the namespace with gone workers and time the sweeps."""
    engine = make_engine(settings, pool_size=2)
    client = redis.Redis.from_url(settings.redis_url)
    connection = connect(settings, "bench sweep")
    try:
        clock = ClusterClock(client)
        channel = connection.channel()
        declare_core(channel)
        heard = clock.now_ms() - TWO_HOURS_MS
        with MySqlWorkerTransactions(engine).transaction() as store:
            for n in range(workers):
                worker_id = f"gone-{n}"
                declare_worker_queue(channel, worker_id)
                store.upsert_heartbeat(
                    Heartbeat(
                        worker_id,
                        "bench",
                        n,
                        8,
                        0,
                        90,
                        0,
                        ("demo.noop",),
                        WorkerState.ACTIVE,
                        heard,
                        heard,
                    ),
                )
        log(f"{workers} gone workers written, each with its queue")

        def recovery(forget_ms: int) -> Rescue:
            return Rescue.on_stores(
                Stores.build(settings, engine, client),
                BatchPublisher(connection.channel()),
                Router(
                    WorkerDirectory(MySqlWorkerTransactions(engine), connection, clock, 15_000),
                    WorkerChooser(),
                ),
                RescueSettings(stale_ms=15_000, forget_ms=forget_ms),
            )

        kept = timed(recovery(0).rescue_dead_workers, sweeps)
        log(f"forgetting off: sweeps took {[round(t) for t in kept]} ms")
        forgetting = recovery(3_600_000)
        passes = math.ceil(workers / FORGET_PER_SWEEP)
        first = timed(forgetting.rescue_dead_workers, passes)
        after = timed(forgetting.rescue_dead_workers, sweeps)
        log(f"forgetting on: {[round(t) for t in first]} ms while forgetting")
        log(f"then {[round(t, 1) for t in after]} ms")
        return {"kept": summary(kept), "forgetting": summary(first), "forgotten": summary(after)}
    finally:
        connection.close()
        client.close()
        engine.dispose()


def main(argv: list[str] | None = None) -> None:
    """Run the measurement and print the JSON line."""
    args = parse_args(argv)
    settings, _ = bench_namespace()
    try:
        prepare_namespace(settings)
        figures = measure(settings, args.workers, args.sweeps)
    finally:
        drop_namespace(settings)
    print(json.dumps({"workers": args.workers, "sweep_ms": figures, "commit": git_commit_dirty()}))


if __name__ == "__main__":
    main()
