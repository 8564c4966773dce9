"""One pipeline phase of ``bench/callbacks.py``: N due jobs through a fresh stack,
with or without a callback each to the receiver, timed in the cluster's clock.

The stack, the insert and the polls are ``bench/pipeline.py``'s, so both benchmarks
measure the same path; the notifier runs in both phases, idle in the one without
callbacks, so the two differ only by the callbacks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import sqlalchemy as sa
from harness import (
    BenchError,
    Service,
    bench_namespace,
    drop_namespace,
    free_port,
    poll_until,
    print_log_tails,
    scan_logs,
    start_services,
    stop_services,
    workers_registered,
)
from pipeline import (
    Callbacks,
    delivered,
    dispatcher_counter,
    insert_due_jobs,
    last_delivery,
    last_end,
    pipeline_services,
    succeeded,
    wait_all,
)
from receiver_process import ReceiverProcess, cpu_seconds
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.engine import make_engine
from common.handler_patterns import EVERY_HANDLER
from common.keys import RedisKeys
from common.namespace import create_app_credentials, prepare_namespace

PY_SPY = Path(sys.executable).parent / "py-spy"


@dataclass
class PipelineRun:
    """What one phase measured: seconds from the commit to the last run (without
    callbacks) or the last callback delivered (with), and each service's CPU seconds."""

    jobs: int
    with_callbacks: bool
    elapsed_s: float
    received: int = 0
    receiver_cpu_share: float = 0.0
    reconciled: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    # With callbacks: seconds from the commit to the last delivery recorded (its message
    # handed to the notifier), and each callback's wait after that, delivered_at less
    # created_at: median, 99th percentile and most, in ms.
    recorded_s: float | None = None
    lag_ms: dict[str, int] = field(default_factory=dict)

    @property
    def per_s(self) -> float:
        """Jobs (or callbacks) per second."""
        return round(self.jobs / max(self.elapsed_s, 1e-3), 1)

    def describe(self) -> str:
        """One line for the log."""
        what = "callbacks delivered" if self.with_callbacks else "jobs succeeded"
        found = (
            f"{self.jobs} {what} in {self.elapsed_s} s ({self.per_s}/s); receiver got "
            f"{self.received}, used {self.receiver_cpu_share:.0%} of a core; CPU s {self.cpu_s}"
        )
        if self.recorded_s is not None:
            found += f"; last recorded {self.recorded_s} s, lag ms {self.lag_ms}"
        return found


def delivery_lags(engine: Engine, committed: int) -> tuple[float, dict[str, int]]:
    """Seconds from ``committed`` to the last delivery recorded, and the callbacks'
    waits from their record to their delivery (ms): median, p99, most."""
    table = sa.table("callback_deliveries", sa.column("created_at"), sa.column("delivered_at"))
    with engine.connect() as conn:
        rows = conn.execute(sa.select(table.c.created_at, table.c.delivered_at)).all()
    lags = sorted(int(delivered - created) for created, delivered in rows)
    last = max(int(created) for created, _ in rows)
    at = {"p50": lags[len(lags) // 2], "p99": lags[len(lags) * 99 // 100], "max": lags[-1]}
    return round((last - committed) / 1000, 3), at


def stack_env(settings: StoreSettings) -> dict[str, str]:
    """The services' environment: the namespace, no API rate limit, loopback callbacks."""
    env = {**os.environ, "KAIROS_NAMESPACE": settings.namespace}
    env["KAIROS_RATE_LIMIT_PER_SECOND"] = "0"
    env["KAIROS_CALLBACK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    return env


def services_cpu(services: list[Service]) -> dict[str, float]:
    """Each live service's CPU seconds so far."""
    return {
        s.name: cpu_seconds(s.process.pid)
        for s in services
        if s.process is not None and s.process.poll() is None
    }


def wait_ready(
    engine: Engine, client: redis.Redis, keys: RedisKeys, services: list[Service]
) -> None:
    """Until both workers are registered and the dispatcher leads."""
    poll_until("workers registered", lambda: workers_registered(engine), services, 60)
    poll_until("dispatcher leads", lambda: bool(client.get(keys.dispatcher_lease)), services, 60)
    time.sleep(1.0)  # the dispatcher's view of live workers refreshes every 0.5 s


def start_profilers(services: list[Service], raw: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy recording the notifier's GIL-holding stacks into ``raw``, and a second
    one, not pausing it, every thread's stacks idle or not into ``raw`` with ``.wall``
    before its suffix (where the attempts' threads wait)."""
    (notifier,) = [s for s in services if s.name == "notifier"]
    assert notifier.process is not None
    pid = ["--pid", str(notifier.process.pid)]
    gil = [str(PY_SPY), "record", "--gil", "-f", "raw", "-r", "100", "-o", str(raw), *pid]
    wall = [str(PY_SPY), "record", "--idle", "--nonblocking", "-f", "raw", "-r", "50"]
    wall += ["-o", str(raw.with_suffix(".wall" + raw.suffix)), *pid]
    return [
        subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for argv in (gil, wall)
    ]


def stop_profilers(profilers: list[subprocess.Popen[bytes]]) -> None:
    """SIGINT each py-spy (it writes its profile then) and wait for it."""
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)
    for profiler in profilers:
        profiler.wait(timeout=60)


def run_pipeline(
    count: int,
    receiver: ReceiverProcess,
    with_callbacks: bool,
    deadline: float,
    profile_to: Path | None = None,
    tree: Path | None = None,
) -> PipelineRun:
    """One phase on a namespace and stack of its own, dropped after; with ``tree``, the
    stack runs that source tree's Kairos (an older commit's, for an A/B pair)."""
    settings, log_dir = bench_namespace()
    env = stack_env(settings)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    try:
        return measure(
            settings, log_dir, count, receiver, with_callbacks, deadline, profile_to, env
        )
    finally:
        drop_namespace(settings)


def measure(
    settings: StoreSettings,
    log_dir: Path,
    count: int,
    receiver: ReceiverProcess,
    with_callbacks: bool,
    deadline: float,
    profile_to: Path | None,
    env: dict[str, str],
) -> PipelineRun:
    """Start the stack, commit the jobs, wait for them (and their callbacks), time it."""
    prepare_namespace(settings)
    create_app_credentials(settings, "bench", EVERY_HANDLER)
    engine = make_engine(settings)
    metrics_port = free_port()
    services = pipeline_services(log_dir, metrics_port, notifier=True)
    client = redis.Redis.from_url(settings.redis_url)
    keys = RedisKeys(settings.namespace)
    callbacks = Callbacks.of(1.0 if with_callbacks else 0.0, receiver.url)
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        start_services(services, env)
        wait_ready(engine, client, keys, services)
        with engine.connect() as conn:
            app_pk = int(conn.execute(sa.text("SELECT id FROM apps")).scalar_one())
        if profile_to is not None:
            profilers = start_profilers(services, profile_to)
        clock = ClusterClock(client)
        with receiver.phase() as seen:
            cpu_before = services_cpu(services)
            insert_due_jobs(engine, app_pk, count, clock.now_ms(), callbacks)
            committed = clock.now_ms()
            client.lpush(keys.wake, 1)
            wait_all("succeeded", lambda: succeeded(engine), count, services, deadline)
            if with_callbacks:
                wait_all("delivered", lambda: delivered(engine), count, services, deadline)
            cpu_after = services_cpu(services)
        last = last_delivery(engine) if with_callbacks else last_end(engine)
        recorded, lags = delivery_lags(engine, committed) if with_callbacks else (None, {})
        return PipelineRun(
            count,
            with_callbacks,
            round((last - committed) / 1000, 3),
            seen.ids,
            seen.cpu_share,
            dispatcher_counter(metrics_port, "kairos_executions_reconciled_total"),
            {k: round(cpu_after[k] - v, 2) for k, v in cpu_before.items() if k in cpu_after},
            recorded,
            lags,
        )
    except BenchError:
        print_log_tails(services)
        raise
    finally:
        stop_profilers(profilers)
        stop_services(services)
        scan_logs(services)
        engine.dispose()
        client.close()
