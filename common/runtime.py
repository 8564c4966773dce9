"""Running a Kairos service process: its logs, metrics, signals, stores and reconnects.

Every service (dispatcher, worker, notifier) starts the same way and keeps its broker
connection the same way; this is the one place that does it. The API runs under
uvicorn, which handles its own signals; it shares the logging set-up.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

import redis

from common.config import StoreSettings
from common.db.engine import make_engine, require_schema
from common.logs import setup_logging
from common.probes import Health, serve_probes, store_probes
from common.store_errors import STORE_LOST
from common.stores import Stores

log = logging.getLogger(__name__)

# Redis calls give up after this long: a Redis that hangs (rather than refusing
# connections) must not hold a service's thread for good.
REDIS_TIMEOUT_SECONDS = 10.0
RECONNECT_FIRST_SECONDS = 1.0
RECONNECT_MAX_SECONDS = 10.0
# A ``serve`` that ran this long before it failed starts the backoff afresh.
HEALTHY_SECONDS = 30.0


class ServiceStop(threading.Event):
    """Set by SIGTERM or SIGINT (or a drain request) when the service is to stop; carries
    the health its metrics port reports, which ``keep_serving`` keeps up to date."""

    def __init__(self) -> None:
        super().__init__()
        self.health = Health(self)


def start_service(
    name: str, settings: StoreSettings, metrics_port: int | None, metrics_host: str
) -> ServiceStop:
    """Set up logging, then metrics and probes (``common.probes``) on the metrics port;
    return the event that SIGTERM or SIGINT sets."""
    setup_logging(name, settings.log_level, settings.log_json)
    stop = ServiceStop()
    if metrics_port is not None:
        for store, probe in store_probes(settings):
            stop.health.add_probe(store, probe)
        serve_probes(stop.health, metrics_port, metrics_host, settings.metrics_fd)

    def handle(signum: int, _frame: FrameType | None) -> None:
        log.info("received signal %d; stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def open_stores(settings: StoreSettings, pool_size: int, pre_ping: bool = True) -> Stores:
    """The namespace's MySQL engine (schema checked) and a Redis client with timeouts."""
    engine = make_engine(settings, pool_size=pool_size, pre_ping=pre_ping)
    require_schema(engine, settings.namespace)
    client = redis.Redis.from_url(
        settings.redis_url,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
    )
    return Stores.build(settings, engine, client)


def backoff_seconds(failures: int, rng: random.Random | None = None) -> float:
    """How long to wait after ``failures`` failures in a row: doubling from 1 s up to
    10 s, jittered over its upper half, so that hundreds of processes that lost a store
    together do not come back in step."""
    ceiling = min(RECONNECT_MAX_SECONDS, RECONNECT_FIRST_SECONDS * 2.0 ** max(0, failures - 1))
    draw: float = (rng or random).random()
    return ceiling / 2 + draw * ceiling / 2


def keep_serving(what: str, serve: Callable[[], None], stop: threading.Event) -> None:
    """Run ``serve`` until ``stop`` is set, starting it again after it fails; a
    ``ServiceStop``'s health says which of the two the loop is doing.

    A store going away is expected now and then: one line, no traceback. Anything else
    is logged with its traceback. Either way the next try waits ``backoff_seconds``; a
    ``serve`` that ran ``HEALTHY_SECONDS`` before it failed starts the count afresh.
    """
    health = stop.health if isinstance(stop, ServiceStop) else None
    failures = 0
    while not stop.is_set():
        began = time.monotonic()
        if health is not None:
            health.loop_running(what)
        try:
            serve()
            continue
        except STORE_LOST as e:
            failures = _count(failures, began)
            wait = backoff_seconds(failures)
            log.warning("%s lost a store (%r); trying again in %.1f s", what, e, wait)
            failed: BaseException = e
        except Exception as e:
            failures = _count(failures, began)
            wait = backoff_seconds(failures)
            log.exception("%s failed; trying again in %.1f s", what, wait)
            failed = e
        if health is not None:
            health.loop_waiting(what, failed)
        stop.wait(wait)


def _count(failures: int, began: float) -> int:
    return 1 if time.monotonic() - began >= HEALTHY_SECONDS else failures + 1
