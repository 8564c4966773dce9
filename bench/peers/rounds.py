"""One timed round of a peer (Celery or Dramatiq) for ``bench/vs_peers.py``.

A round makes a vhost of its own, starts the peer's worker processes on it, waits for
their consumers, warms them up, then submits N no-op tasks from one thread and waits for
the Redis stamp of the N-th completion. Workers are stopped by pid (with any children
they forked), the vhost and the round's Redis keys dropped, whatever happens.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx
import psutil
import redis
from cpu_meter import CpuMeter, per_job_ms
from harness import (
    REPO,
    STARTUP_SECONDS,
    BenchError,
    Service,
    check_alive,
    drop_redis_keys,
    drop_vhost,
    log,
    poll_until,
    print_log_tails,
    scan_logs,
    start_services,
    stop_services,
)

from common.config import StoreSettings
from common.vhost import ensure_vhost, queue_stats

from . import (
    AMQP_URL_ENV,
    CELERY_QUEUE,
    DRAMATIQ_QUEUE,
    REDIS_URL_ENV,
    done_at_key,
)

WARM_UP_TASKS = 64
POLL_SECONDS = 0.2
SETTLE_SECONDS = 1.0
CHILD_STOP_SECONDS = 5.0


@dataclass(frozen=True)
class RoundFigure:
    """What one round of one system measured."""

    system: str
    index: int
    jobs: int
    seconds: float
    submit_seconds: float
    note: str
    # CPU milliseconds per job by process, the store servers too (``cpu_meter``).
    cpu_ms_per_job: dict[str, float] = field(default_factory=dict)

    @property
    def jobs_per_s(self) -> float:
        """Jobs run per second, first submit to last completion."""
        return self.jobs / self.seconds


class Sender(Protocol):
    """The submitting side of a peer: send one no-op task, close the connection."""

    def send(self, counter_key: str, expected: int) -> None: ...

    def close(self) -> None: ...


class CelerySender:
    """``apply_async`` on a Celery app of the round's vhost."""

    def __init__(self, amqp_url: str) -> None:
        from .celery_tasks import make_celery

        self._app, self._task = make_celery(amqp_url)

    def send(self, counter_key: str, expected: int) -> None:
        """Publish one task."""
        self._task.apply_async(args=(counter_key, expected))

    def close(self) -> None:
        """Release the app's broker connections."""
        self._app.close()


class DramatiqSender:
    """``actor.send`` on a Dramatiq RabbitMQ broker of the round's vhost."""

    def __init__(self, amqp_url: str) -> None:
        from .dramatiq_tasks import make_broker

        self._broker, self._actor = make_broker(amqp_url)

    def send(self, counter_key: str, expected: int) -> None:
        """Enqueue one message."""
        self._actor.send(counter_key, expected)

    def close(self) -> None:
        """Close the broker's connections."""
        self._broker.close()


@dataclass(frozen=True)
class Peer:
    """How to run one peer: its workers, its queue, its submitting side."""

    name: str
    queue: str
    consumers: int
    argvs: Callable[[], dict[str, list[str]]]
    sender: Callable[[str], Sender]
    note: str


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def celery_argvs() -> dict[str, list[str]]:
    """Two Celery worker processes of 16 threads each on the benchmark queue."""
    base = [_tool("celery"), "-A", "bench.peers.celery_tasks", "worker"]
    base += ["--pool", "threads", "--concurrency", "16", "-Q", CELERY_QUEUE]
    base += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    base += ["--loglevel", "WARNING"]
    return {f"celery-{i}": [*base, "-n", f"bench{i}@%h"] for i in (1, 2)}


def dramatiq_argvs() -> dict[str, list[str]]:
    """One ``dramatiq`` command forking 2 worker processes of 8 threads each."""
    argv = [_tool("dramatiq"), "bench.peers.dramatiq_tasks", "--processes", "2"]
    return {"dramatiq": [*argv, "--threads", "8"]}


CELERY = Peer(
    "celery",
    CELERY_QUEUE,
    2,
    celery_argvs,
    CelerySender,
    "2 workers x 16 threads, apply_async from 1 thread",
)
DRAMATIQ = Peer(
    "dramatiq",
    DRAMATIQ_QUEUE,
    2,
    dramatiq_argvs,
    DramatiqSender,
    "2 processes x 8 threads, actor.send from 1 thread",
)


def vhost_url(settings: StoreSettings) -> str:
    """The AMQP URL of the settings' namespace as a vhost."""
    return settings.amqp_url.rstrip("/") + "/" + quote(settings.namespace, safe="")


def consumers(settings: StoreSettings, queue: str) -> int:
    """Consumers on ``queue`` as the broker sees them; 0 while it does not exist."""
    try:
        return queue_stats(settings, queue)["consumers"]
    except httpx.HTTPError:
        return 0


def stop_with_children(services: list[Service]) -> None:
    """Stop the services by pid, then any process they forked that outlived them."""
    children: list[psutil.Process] = []
    for service in services:
        if service.process is not None and service.process.poll() is None:
            try:
                children += psutil.Process(service.process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
    stop_services(services)
    _, alive = psutil.wait_procs(children, timeout=CHILD_STOP_SECONDS)
    for child in alive:
        log(f"child pid {child.pid} outlived its parent; SIGKILL")
        child.kill()


@contextmanager
def peer_workers(
    peer: Peer, settings: StoreSettings, log_dir: Path
) -> Iterator[tuple[str, list[Service]]]:
    """The round's vhost with the peer's workers on it; all of it gone on exit."""
    log_dir.mkdir(parents=True, exist_ok=True)
    services = [Service(n, a, log_dir / f"{n}.log") for n, a in peer.argvs().items()]
    amqp_url = vhost_url(settings)
    env = {**os.environ, AMQP_URL_ENV: amqp_url, REDIS_URL_ENV: settings.redis_url}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    try:
        ensure_vhost(settings)
        start_services(services, env)
        yield amqp_url, services
    except BenchError:
        print_log_tails(services)
        raise
    finally:
        stop_with_children(services)
        _drop(settings)
        scan_logs(services)


def _drop(settings: StoreSettings) -> None:
    for what, drop in (("vhost", drop_vhost), ("redis keys", drop_redis_keys)):
        try:
            drop(settings)
        except Exception as e:
            log(f"could not drop {what} {settings.namespace}: {e!r}")


def wait_stamp(client: redis.Redis, key: str, services: list[Service], seconds: float) -> float:
    """Poll until the N-th completion stamped ``key``; its wall time (epoch seconds)."""
    deadline = time.monotonic() + seconds
    next_report = time.monotonic() + 5.0
    while True:
        stamp: Any = client.get(done_at_key(key))
        if stamp is not None:
            return float(stamp)
        check_alive(services)
        now = time.monotonic()
        if now > deadline:
            raise BenchError(f"{key}: only {client.get(key)!r} done after {seconds:.0f} s")
        if now >= next_report:
            log(f"{key}: {int(client.get(key) or 0)} done")
            next_report = now + 5.0
        time.sleep(POLL_SECONDS)


def run_peer_round(
    peer: Peer, jobs: int, deadline: float, run_id: str, index: int, log_dir: Path
) -> RoundFigure:
    """Start the peer on a fresh vhost, warm it up, time ``jobs`` tasks."""
    settings = StoreSettings(namespace=f"peers_{run_id}_{peer.name}_{index}")
    client = redis.Redis.from_url(settings.redis_url)
    with peer_workers(peer, settings, log_dir / f"{peer.name}-{index}") as (url, services):
        sender = peer.sender(url)
        try:

            def ready() -> bool:
                return consumers(settings, peer.queue) >= peer.consumers

            poll_until(f"{peer.name} consumers", ready, services, STARTUP_SECONDS)
            warm = f"{settings.namespace}:warm"
            for _ in range(WARM_UP_TASKS):
                sender.send(warm, WARM_UP_TASKS)
            wait_stamp(client, warm, services, STARTUP_SECONDS)
            log(f"{peer.name} round {index} warm; sending {jobs} tasks")
            key = f"{settings.namespace}:run"
            meter = CpuMeter()
            meter.start(services)
            first = time.time()
            for _ in range(jobs):
                sender.send(key, jobs)
            submitted = time.time()
            done_at = wait_stamp(client, key, services, deadline)
            cpu = per_job_ms(meter.stop(), jobs)
            time.sleep(SETTLE_SECONDS)
            runs = int(client.get(key) or 0)
        finally:
            sender.close()
            client.close()
    note = f"{peer.note}; {runs - jobs} extra runs"
    return RoundFigure(peer.name, index, jobs, done_at - first, submitted - first, note, cpu)


def run_celery_round(
    jobs: int, deadline: float, run_id: str, index: int, log_dir: Path
) -> RoundFigure:
    """One Celery round."""
    return run_peer_round(CELERY, jobs, deadline, run_id, index, log_dir)


def run_dramatiq_round(
    jobs: int, deadline: float, run_id: str, index: int, log_dir: Path
) -> RoundFigure:
    """One Dramatiq round."""
    return run_peer_round(DRAMATIQ, jobs, deadline, run_id, index, log_dir)
