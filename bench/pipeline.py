"""Pipeline throughput: N no-op jobs already due in MySQL, 1 dispatcher, 2 workers.

Starts ``kairos dispatcher`` and two ``kairos worker`` processes (capacity 16) on a
namespace of its own, waits until the dispatcher leads and both workers are live,
then commits N due ``demo.noop`` jobs in multi-row INSERTs, wakes the dispatcher, and
times from that commit to the last SUCCEEDED execution (``ended_at``, cluster clock).
Every guarantee stays on: persistent messages committed to the broker, every
execution and result written to MySQL.

With ``--callback-share F`` that share of the jobs calls back to a local receiver
answering 200, and ``kairos notifier`` runs too; the run then also waits for every
callback to be DELIVERED and times the last one. Either way it prints the CPU
milliseconds each process (the store servers too) spent per job from the commit to the
end (``bench/cpu_meter.py``), and reads the dispatcher's
``kairos_executions_reconciled_total`` and ``kairos_results_set_aside_total`` at the
end: both must stay at zero.

    .venv/bin/python bench/pipeline.py --jobs 20000
    .venv/bin/python bench/pipeline.py --jobs 20000 --callback-share 0.33
    .venv/bin/python bench/pipeline.py --jobs 20000 --alert-rule [--alert-streak 3] [--fail]

``--alert-rule`` adds an alert rule on every app (FAILED, LOST, TIMED_OUT,
DEAD_CALLBACK, to a webhook nobody serves: its alerts are recorded and queued, not
sent) before the load; ``--fail`` makes every job ``demo.fail``, so that every run's
end is one the rule covers (one alert per job: each job is a subject of its own).

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis
import sqlalchemy as sa
from callback_sink import CallbackSink
from cpu_meter import CpuMeter, per_job_ms
from harness import (
    WORKER_CAPACITY,
    WORKER_IDS,
    BenchError,
    Service,
    bench_namespace,
    drop_namespace,
    free_port,
    git_commit_dirty,
    log,
    poll_until,
    print_log_tails,
    scan_logs,
    start_services,
    stop_services,
    workers_registered,
)
from sqlalchemy.engine import Engine

from common.alerts.kinds import parse_kinds
from common.alerts.rules import NewAlertRule, add_rule
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.engine import make_engine
from common.db.schema import callback_deliveries, executions, jobs
from common.handler_patterns import EVERY_HANDLER
from common.keys import RedisKeys
from common.namespace import create_app_credentials, prepare_namespace
from services.stack import DEMO_HANDLERS

INSERT_CHUNK = 5_000
ALERT_KINDS = "FAILED,LOST,TIMED_OUT,DEAD_CALLBACK"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds to wait")
    parser.add_argument(
        "--callback-share",
        type=float,
        default=0.0,
        help="share of the jobs that call back to a local receiver (0 to 1; default 0)",
    )
    parser.add_argument("--alert-rule", action="store_true", help="an alert rule on every app")
    parser.add_argument("--alert-streak", type=int, default=1, help="the rule's --streak")
    parser.add_argument("--fail", action="store_true", help="every job runs demo.fail")
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Load:
    """What the jobs run and what stands by: the handler, whether an alert rule
    covers every app (and its streak), and the status every run ends with."""

    handler: str = "demo.noop"
    alert_rule: bool = False
    alert_streak: int = 1

    @property
    def final_status(self) -> str:
        """The status every run ends with."""
        return "FAILED" if self.handler == "demo.fail" else "SUCCEEDED"


def add_alert_rule(engine: Engine, streak: int) -> None:
    """A rule on every app, to a port nobody listens on."""
    asked = NewAlertRule("http://127.0.0.1:9/alerts", parse_kinds(ALERT_KINDS), None, streak)
    with engine.begin() as conn:
        add_rule(conn, asked, "bench", 0)


def pipeline_services(log_dir: Path, metrics_port: int, notifier: bool) -> list[Service]:
    """One dispatcher (serving metrics), the benchmark's two workers, and a notifier."""
    kairos = str(Path(sys.executable).parent / "kairos")
    argvs = {"dispatcher": [kairos, "dispatcher", "--metrics-port", str(metrics_port)]}
    for worker_id in WORKER_IDS:
        argvs[worker_id] = [kairos, "worker", "--id", worker_id, "--capacity"]
        argvs[worker_id] += [str(WORKER_CAPACITY), "--handlers", DEMO_HANDLERS]
    if notifier:
        argvs["notifier"] = [kairos, "notifier"]
    return [Service(name, argv, log_dir / f"{name}.log") for name, argv in argvs.items()]


def insert_due_jobs(
    engine: Engine,
    app_pk: int,
    count: int,
    now_ms: int,
    callbacks: Callbacks,
    handler: str = "demo.noop",
) -> None:
    """Commit ``count`` demo.noop jobs due now, in multi-row INSERTs, one transaction;
    every ``callbacks.every``-th calls back to ``callbacks.url``."""
    row = {
        "app_pk": app_pk,
        "job_name": "bench",
        "handler": handler,
        "params": "{}",
        "next_trigger_time": now_ms,
        "status": "WAITING",
        "version": 0,
        "created_at": now_ms,
        "updated_at": now_ms,
        "callback_url": None,
    }
    rows = [
        row if not callbacks.calls_back(n) else {**row, "callback_url": callbacks.url}
        for n in range(count)
    ]
    with engine.begin() as conn:
        for start in range(0, count, INSERT_CHUNK):
            conn.execute(jobs.insert(), rows[start : start + INSERT_CHUNK])


@dataclass(frozen=True)
class Callbacks:
    """Which jobs call back, and where."""

    every: int
    url: str

    @classmethod
    def of(cls, share: float, url: str) -> Callbacks:
        """Every ``round(1 / share)``-th job; none when ``share`` is 0."""
        return cls(round(1 / share) if share > 0 else 0, url)

    def calls_back(self, n: int) -> bool:
        """Whether job number ``n`` (from 0) calls back."""
        return self.every > 0 and n % self.every == 0

    def expected(self, count: int) -> int:
        """How many of ``count`` jobs call back."""
        return sum(1 for n in range(count) if self.calls_back(n))


def ended(engine: Engine, status: str) -> int:
    """How many executions have ended with ``status``."""
    query = sa.select(sa.func.count()).where(executions.c.status == status)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def succeeded(engine: Engine) -> int:
    """How many executions have SUCCEEDED."""
    return ended(engine, "SUCCEEDED")


def delivered(engine: Engine) -> int:
    """How many callbacks were DELIVERED."""
    query = sa.select(sa.func.count()).where(callback_deliveries.c.status == "DELIVERED")
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def last_end(engine: Engine) -> int:
    """The latest ``ended_at`` of any execution."""
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.max(executions.c.ended_at))).scalar_one())


def last_delivery(engine: Engine) -> int:
    """The latest ``delivered_at`` of any callback."""
    query = sa.select(sa.func.max(callback_deliveries.c.delivered_at))
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def wait_all(
    what: str, done: Callable[[], int], count: int, services: list[Service], deadline: float
) -> None:
    """Poll until ``done()`` reaches ``count``, with a progress line every second."""
    started = time.monotonic()
    while (now := done()) < count:
        if time.monotonic() - started > deadline:
            raise BenchError(f"only {now}/{count} {what} after {deadline:.0f} s")
        poll_until("services alive", lambda: True, services, 1)
        log(f"{now}/{count} {what}")
        time.sleep(1.0)


def dispatcher_counter(port: int, name: str) -> float:
    """The value of an unlabelled-or-summed counter on the dispatcher's metrics page."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def run(
    settings: StoreSettings,
    count: int,
    log_dir: Path,
    deadline: float,
    share: float,
    load: Load = Load(),
) -> dict[str, object]:
    """Start the pipeline, load it, and time it."""
    prepare_namespace(settings)
    create_app_credentials(settings, "bench", EVERY_HANDLER)
    engine = make_engine(settings)
    if load.alert_rule:
        add_alert_rule(engine, load.alert_streak)
    metrics_port = free_port()
    services = pipeline_services(log_dir, metrics_port, notifier=share > 0)
    client = redis.Redis.from_url(settings.redis_url)
    keys = RedisKeys(settings.namespace)
    sink = CallbackSink()
    callbacks = Callbacks.of(share, sink.url)
    # The per-app rate limit (on by default) would measure itself, not Kairos.
    env = {
        **os.environ,
        "KAIROS_NAMESPACE": settings.namespace,
        "KAIROS_RATE_LIMIT_PER_SECOND": "0",
    }
    # The sink listens on this machine, which callbacks may reach only when allowed.
    env["KAIROS_CALLBACK_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    try:
        start_services(services, env)
        poll_until("workers registered", lambda: workers_registered(engine), services, 60)
        poll_until(
            "dispatcher leads", lambda: bool(client.get(keys.dispatcher_lease)), services, 60
        )
        time.sleep(1.0)  # the dispatcher's view of live workers refreshes every 0.5 s
        with engine.connect() as conn:
            app_pk = int(conn.execute(sa.text("SELECT id FROM apps")).scalar_one())
        clock = ClusterClock(client)
        meter = CpuMeter()
        meter.start(services)
        begin = clock.now_ms()
        insert_due_jobs(engine, app_pk, count, begin, callbacks, load.handler)
        committed = clock.now_ms()
        client.lpush(keys.wake, 1)
        log(f"{count} due jobs committed in {committed - begin} ms")
        status = load.final_status
        wait_all(status.lower(), lambda: ended(engine, status), count, services, deadline)
        elapsed_ms = last_end(engine) - committed
        figures: dict[str, object] = {
            "jobs": count,
            "insert_ms": committed - begin,
            "elapsed_s": round(elapsed_ms / 1000, 3),
            "jobs_per_s": round(count / (elapsed_ms / 1000), 1),
            "handler": load.handler,
            "alert_rule": load.alert_rule,
        }
        expected = callbacks.expected(count)
        if expected:
            wait_all("callbacks delivered", lambda: delivered(engine), expected, services, deadline)
            figures["callbacks"] = expected
            figures["callbacks_received"] = len(sink.ids)
            figures["last_callback_s"] = round((last_delivery(engine) - committed) / 1000, 3)
        figures["cpu_ms_per_job"] = per_job_ms(meter.stop(), count)
        figures["reconciled"] = dispatcher_counter(
            metrics_port, "kairos_executions_reconciled_total"
        )
        figures["results_set_aside"] = dispatcher_counter(
            metrics_port, "kairos_results_set_aside_total"
        )
        figures["commit"] = git_commit_dirty()
        return figures
    except BenchError:
        print_log_tails(services)
        raise
    finally:
        stop_services(services)
        scan_logs(services)
        sink.close()
        engine.dispose()
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark once and print its figures."""
    args = parse_args(argv)
    settings, log_dir = bench_namespace()
    try:
        load = Load("demo.fail" if args.fail else "demo.noop", args.alert_rule, args.alert_streak)
        figures = run(settings, args.jobs, log_dir, args.deadline, args.callback_share, load)
    except BenchError as e:
        log(f"failed: {e}")
        return 1
    finally:
        drop_namespace(settings)
    print(f"{figures['jobs']} jobs in {figures['elapsed_s']} s: {figures['jobs_per_s']} jobs/s")
    if "callbacks" in figures:
        print(
            f"{figures['callbacks']} callbacks, the last delivered "
            f"{figures['last_callback_s']} s after the commit"
        )
    cpu = figures["cpu_ms_per_job"]
    assert isinstance(cpu, dict)
    print("CPU ms per job: " + ", ".join(f"{name} {ms:g}" for name, ms in cpu.items()))
    print(
        f"reconciled {figures['reconciled']:g}, results set aside {figures['results_set_aside']:g}"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
