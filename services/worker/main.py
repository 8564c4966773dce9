"""``kairos worker``: consume this worker's queue and run handlers in a pool."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from functools import partial
from types import FrameType

import redis
from pika.adapters.blocking_connection import BlockingConnection

from common.broker import connect
from common.clock import ClusterClock
from common.config import WorkerSettings
from common.db.engine import make_engine, require_schema
from common.keys import RedisKeys
from common.logs import setup_logging
from common.messages import ExecutionResult
from common.metrics import start_metrics_server
from common.pooled_consumer import PooledConsumer
from common.states import WorkerState
from common.topology import declare_core, declare_worker_queue
from services.worker.heartbeat import Heartbeater
from services.worker.registry import collect_handlers
from services.worker.runner import Admitted, ExecutionRunner, result_messages

log = logging.getLogger(__name__)

BUILTIN_HANDLERS = "services.worker.demo"
DRAIN_GRACE_SECONDS = 30.0


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        log.info("received signal %d; draining", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def run_worker(settings: WorkerSettings) -> None:
    """Run a worker until SIGTERM or SIGINT, then drain and stop."""
    setup_logging("worker", settings.log_level, settings.log_json)
    if settings.metrics_port is not None:
        start_metrics_server(settings.metrics_port, settings.metrics_host)
    worker_id = settings.worker_id or f"{socket.gethostname()}-{int(time.time())}"
    modules = [BUILTIN_HANDLERS, *[m.strip() for m in settings.handlers.split(",") if m.strip()]]
    handlers = collect_handlers(modules)
    client = redis.Redis.from_url(settings.redis_url)
    clock = ClusterClock(client)
    keys = RedisKeys(settings.namespace)
    engine = make_engine(settings, pool_size=2)
    require_schema(engine, settings.namespace)
    connection = connect(settings, f"kairos worker {worker_id}")
    setup = connection.channel()
    declare_core(setup)
    queue = declare_worker_queue(setup, worker_id)
    setup.close()
    runner = ExecutionRunner(
        worker_id, handlers, client, keys, clock, settings.idempotency_ttl_seconds
    )
    consumer = PooledConsumer(
        connection,
        queue,
        settings.capacity,
        runner.admit,
        runner.execute,
        partial(result_messages, worker_id),
        ack_deadline=settings.ack_deadline_seconds,
    )
    heartbeat = Heartbeater(
        worker_id,
        settings.capacity,
        tuple(sorted(handlers)),
        lambda: consumer.active,
        consumer.stats,
        (client, engine, keys, clock),
        settings.heartbeat_seconds,
    )
    stop = _stop_on_signals()
    heartbeat.start()
    consumer.start()
    log.info(
        "worker %s consuming %s, capacity %d, handlers %s",
        worker_id,
        queue,
        settings.capacity,
        ", ".join(sorted(handlers)),
        extra={"worker_id": worker_id},
    )
    while not stop.is_set():
        connection.process_data_events(time_limit=0.2)
    _drain(connection, consumer, heartbeat)
    connection.close()
    consumer.close()
    engine.dispose()
    log.info("worker %s stopped", worker_id, extra={"worker_id": worker_id})


def _drain(
    connection: BlockingConnection,
    consumer: PooledConsumer[Admitted, ExecutionResult | None],
    heartbeat: Heartbeater,
) -> None:
    consumer.stop_consuming()
    heartbeat.state = WorkerState.DRAINING
    deadline = time.monotonic() + DRAIN_GRACE_SECONDS
    while consumer.active and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.2)
    heartbeat.stop(WorkerState.STOPPED)
