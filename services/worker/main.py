"""``kairos worker``: consume this worker's queue and run handlers in a pool."""

from __future__ import annotations

import logging
import socket
import threading
import time

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import AMQPError

from common.broker import BatchPublisher, connect
from common.config import WorkerSettings
from common.consumer.pooled import PooledConsumer
from common.consumer.stats import ConsumerStats
from common.consumer.work import ConsumerSettings, ConsumerWork
from common.errors import ConfigurationError
from common.gc_freeze import freeze_startup_heap
from common.messages import ExecutionResult
from common.runtime import keep_serving, open_stores, start_service
from common.states import WorkerState
from common.stores import Stores
from common.topology import declare_core, declare_worker_queue
from common.tracing.spans import start_tracing
from services.worker.fence import Fence
from services.worker.heartbeat import Heartbeater, HeartbeatHooks, Load, WorkerIdentity
from services.worker.id_guard import refuse_if_running
from services.worker.incarnation import new_incarnation, settle_previous, wait_for_no_consumer
from services.worker.log_quota import build_run_log_quota
from services.worker.log_writer import RunLogWriter, mysql_store
from services.worker.packs import DispatchPacking, Unit, handler_of
from services.worker.registry import collect_handlers
from services.worker.run_logs import install_capture
from services.worker.runner import Admitted, ExecutionRunner
from services.worker.start_guard import MySQLRows

log = logging.getLogger(__name__)

DRAIN_GRACE_SECONDS = 30.0
# Deliveries held per run slot by default: the next run starts as soon as one ends
# instead of a broker round trip later (the figure Celery uses as its default too).
PREFETCH_PER_SLOT = 4
# How long a starting worker waits for its previous process's consumer to leave its
# queue: the broker drops a dead peer's connection within two AMQP heartbeats (30 s).
PREVIOUS_CONSUMER_WAIT_SECONDS = 65.0


def handler_modules(setting: str) -> list[str]:
    """The handler modules named by ``--handlers`` (comma-separated); at least one."""
    modules = [m.strip() for m in setting.split(",") if m.strip()]
    if not modules:
        raise ConfigurationError(
            "no handler modules: pass --handlers MODULE[,MODULE...] (KAIROS_HANDLERS); "
            "the demo handlers are in services.worker.demo"
        )
    return modules


def run_worker(settings: WorkerSettings) -> None:
    """Run a worker until SIGTERM or SIGINT (or an operator's drain request), then drain
    and stop.

    A lost broker connection is opened again (with a jittered backoff) instead of ending
    the process; deliveries it held go back to the queue, and a run that was going when
    it dropped goes on: the copy of its message that comes back waits for it and reports
    its outcome (``ExecutionRunner``). An operator's standing drain (``kairos workers
    drain``) stops the consuming without stopping the process.
    """
    stop = start_service("worker", settings, settings.metrics_port, settings.metrics_host)
    worker_id = settings.worker_id or f"{socket.gethostname()}-{int(time.time())}"
    handlers = collect_handlers(handler_modules(settings.handlers))
    stores = open_stores(settings, pool_size=2)
    refuse_if_running(stores, worker_id)
    install_capture()
    quota = build_run_log_quota(settings.redis_url, stores.keys, stores.apps())
    run_logs = RunLogWriter(mysql_store(stores.engine), settings.run_log_max_bytes, quota=quota)
    runner = ExecutionRunner(
        worker_id,
        handlers,
        stores.redis,
        stores.keys,
        stores.clock,
        settings.idempotency_ttl_seconds,
        rows=MySQLRows(stores.engine),
        tracing=start_tracing("worker", settings.otel_endpoint),
        run_logs=run_logs,
    )
    fence = Fence(settings.heartbeat_seconds)
    serving = _Serving(settings, worker_id, runner, ConsumerStats(), fence, stores)
    identity = WorkerIdentity(
        worker_id, settings.capacity, tuple(sorted(handlers)), serving.incarnation
    )
    hooks = HeartbeatHooks(
        on_drain=stop.set, on_drained=serving.set_drained, on_reopen=serving.wake
    )
    heartbeat = Heartbeater(identity, serving, stores, settings.heartbeat_seconds, hooks, fence)
    freeze_startup_heap()
    heartbeat.start()
    run_logs.start()
    log.info(
        "worker %s (incarnation %s) runs handlers %s",
        worker_id,
        serving.incarnation,
        ", ".join(sorted(handlers)),
        extra={"worker_id": worker_id},
    )
    keep_serving("worker", lambda: serving.serve(stop, heartbeat), stop)
    heartbeat.stop(WorkerState.STOPPED)
    run_logs.stop()
    stores.engine.dispose()
    log.info("worker %s stopped", worker_id, extra={"worker_id": worker_id})


class _Serving:
    """One broker connection's worth of consuming; ``serve`` runs again after a loss."""

    def __init__(
        self,
        settings: WorkerSettings,
        worker_id: str,
        runner: ExecutionRunner,
        stats: ConsumerStats,
        fence: Fence | None = None,
        stores: Stores | None = None,
        incarnation: str = "",
    ) -> None:
        self.settings = settings
        self.stores = stores
        self.incarnation = incarnation or new_incarnation()
        self.settled = False
        self.drained = False
        self._heartbeat: Heartbeater | None = None
        self._connection: BlockingConnection | None = None
        self._stop = threading.Event()
        self.worker_id = worker_id
        self.runner = runner
        self.stats = stats
        self.consumer: PooledConsumer[Unit, Admitted, ExecutionResult | None] | None
        self.consumer = None
        self.fence = fence
        runner.overruns.on_release(self.wake)

    def load(self) -> Load:
        """Runs going now on the current connection, and timed-out runs still going."""
        overrun = self.runner.overruns.count
        active = self.consumer.active if self.consumer is not None else 0
        return Load(active + overrun, overrun)

    def running_for(self, now: float) -> dict[str, float]:
        """Seconds the runs of each handler going now have gone (their lower median)."""
        consumer = self.consumer
        return consumer.running_for(now) if consumer is not None else {}

    def wake(self) -> None:
        """Look for runs to start again: a slot was freed or the fence opened."""
        consumer = self.consumer
        if consumer is not None:
            consumer.wake()

    def _occupied(self) -> int:
        """Slots the pool may not use: timed-out runs still going, or all of them while
        the fence is closed (no heartbeat lands)."""
        if self.fence is not None and self.fence.closed:
            return self.settings.capacity
        return self.runner.overruns.count

    def set_drained(self, drained: bool) -> None:
        """An operator drained or undrained this worker (from the heartbeat thread): the
        consumer stops or resumes taking messages, in the connection's thread."""
        self.drained = drained
        connection = self._connection
        if connection is not None:
            try:
                connection.add_callback_threadsafe(self._apply_drained)
            except AMQPError:
                pass  # the connection is gone; the next one starts as ``drained`` says

    def _apply_drained(self) -> None:
        consumer, heartbeat = self.consumer, self._heartbeat
        if consumer is None or heartbeat is None or heartbeat.state is WorkerState.STOPPED:
            return
        if self.drained:
            consumer.stop_consuming()
            heartbeat.state = WorkerState.DRAINING
        elif not self._stop.is_set():
            consumer.resume_consuming()
            heartbeat.state = WorkerState.ACTIVE

    def held(self) -> int:
        """Dispatch messages held unacked on the current connection."""
        return self.consumer.held if self.consumer is not None else 0

    def _settle_previous(
        self, connection: BlockingConnection, setup: BlockingChannel, queue: str
    ) -> None:
        """Once per process, before consuming: report what a previous process of this
        worker id took and never reported (``services/worker/incarnation.py``)."""

        def consumers() -> int:
            return int(setup.queue_declare(queue, passive=True).method.consumer_count)

        if not wait_for_no_consumer(consumers, PREVIOUS_CONSUMER_WAIT_SECONDS):
            log.error(
                "another process consumes worker %s's queue: two workers share this id; "
                "give each its own --id",
                self.worker_id,
                extra={"worker_id": self.worker_id},
            )
        elif self.stores is not None:
            publisher = BatchPublisher(connection.channel())
            settle_previous(self.stores, publisher, self.worker_id, self.incarnation)
        self.settled = True

    def serve(self, stop: threading.Event, heartbeat: Heartbeater) -> None:
        """Consume until ``stop``, then drain; raises ``AMQPError`` if the broker goes."""
        connection = connect(self.settings, f"kairos worker {self.worker_id}")
        try:
            setup = connection.channel()
            declare_core(setup)
            queue = declare_worker_queue(setup, self.worker_id)
            if not self.settled:
                self._settle_previous(connection, setup, queue)
            setup.close()
            self.consumer = PooledConsumer(
                connection,
                ConsumerSettings(
                    queue,
                    self.settings.capacity,
                    prefetch=max(
                        self.settings.capacity,
                        self.settings.prefetch or PREFETCH_PER_SLOT * self.settings.capacity,
                    ),
                    ack_deadline=self.settings.ack_deadline_seconds,
                    hold_unrouted=True,
                ),
                ConsumerWork(
                    DispatchPacking(),
                    self.runner.admit,
                    self.runner.execute,
                    self.runner.report,
                    release=self.runner.release,
                    occupied=self._occupied,
                    redelivered=self.runner.note_redelivered,
                    orphaned=self.runner.keep_outcome,
                    kind=handler_of,
                ),
                self.stats,
            )
            self.consumer.start()
            self._heartbeat, self._stop, self._connection = heartbeat, stop, connection
            if self.drained:
                self._apply_drained()
            log.info(
                "worker %s consuming %s, capacity %d",
                self.worker_id,
                queue,
                self.settings.capacity,
                extra={"worker_id": self.worker_id},
            )
            while not stop.is_set():
                connection.process_data_events(time_limit=0.2)
            _drain(connection, self.consumer, heartbeat)
        finally:
            self._connection = None
            if self.consumer is not None:
                self.consumer.close()
                self.consumer = None
            if connection.is_open:
                connection.close()


def _drain(
    connection: BlockingConnection,
    consumer: PooledConsumer[Unit, Admitted, ExecutionResult | None],
    heartbeat: Heartbeater,
) -> None:
    """Take nothing new, give back what waits, and publish the runs going as they end.

    A run still going after ``DRAIN_GRACE_SECONDS`` is waited for too: dropping its
    result would leave it to be reported LOST. The grace only says when to log it; a
    process killed meanwhile (SIGKILL) has its run reported LOST, as any worker's death.
    """
    consumer.stop_consuming()
    heartbeat.state = WorkerState.DRAINING
    deadline = time.monotonic() + DRAIN_GRACE_SECONDS
    while consumer.active and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.2)
    if consumer.active:
        log.warning(
            "%d runs still going after the %.0f s drain grace; waiting for them to report",
            consumer.active,
            DRAIN_GRACE_SECONDS,
        )
    while consumer.active:
        connection.process_data_events(time_limit=0.2)
