"""``kairos dispatcher``: lease, due-job dispatch, recovery sweeps and the results consumer."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from types import FrameType

import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, connect
from common.clock import ClusterClock
from common.config import DispatcherSettings
from common.db.engine import make_engine, require_schema
from common.keys import RedisKeys
from common.lease import RedisLease
from common.loadbalance import Strategy, WorkerChooser
from common.logs import setup_logging
from common.topology import declare_core
from services.dispatcher.directory import WorkerDirectory
from services.dispatcher.leadership import Leadership
from services.dispatcher.recovery import Recovery
from services.dispatcher.results_consumer import ResultsConsumer
from services.dispatcher.scheduler import DueJobDispatcher

log = logging.getLogger(__name__)

RECOVERY_INTERVAL_SECONDS = 1.0


class Dispatcher:
    """One dispatcher process: dispatches while it leads, consumes results always."""

    def __init__(self, settings: DispatcherSettings) -> None:
        self.settings = settings
        self.name = settings.dispatcher_id or f"{socket.gethostname()}-{os.getpid()}"
        self.redis = redis.Redis.from_url(settings.redis_url, socket_timeout=10)
        self.clock = ClusterClock(self.redis)
        self.keys = RedisKeys(settings.namespace)
        self.engine: Engine = make_engine(settings)
        require_schema(self.engine, settings.namespace)
        lease = RedisLease(self.redis, self.keys.dispatcher_lease, settings.lease_ttl_ms)
        self.leadership = Leadership(lease)
        self.stop = threading.Event()

    def run(self) -> None:
        """Run until ``stop`` is set, then release the lease."""
        results = ResultsConsumer(self.settings, self.engine, self.clock, self.name)
        results_thread = threading.Thread(target=results.run, args=(self.stop,), name="results")
        results_thread.start()
        self.leadership.start()
        try:
            while not self.stop.is_set():
                if not self.leadership.is_leader.wait(0.2):
                    continue
                try:
                    self._lead()
                except Exception:
                    log.exception("dispatch loop failed; starting again in 1 s")
                    self.stop.wait(1.0)
        finally:
            self.leadership.stop()
            results_thread.join(timeout=10)
            self.engine.dispose()

    def _lead(self) -> None:
        connection = connect(self.settings, f"kairos dispatcher {self.name}")
        try:
            channel = connection.channel()
            declare_core(channel)
            publisher = BatchPublisher(channel)
            directory = WorkerDirectory(
                self.engine, connection, self.clock, self.settings.heartbeat_stale_ms
            )
            chooser = WorkerChooser(Strategy(self.settings.strategy))
            scheduler = DueJobDispatcher(
                self.engine,
                publisher,
                directory,
                chooser,
                self.clock,
                self.settings.batch_size,
                self.settings.max_sleep_ms,
            )
            recovery = Recovery(
                self.engine,
                publisher,
                directory,
                chooser,
                (self.redis, self.keys, self.clock),
                self.settings.pending_republish_ms,
                self.settings.heartbeat_stale_ms,
            )
            self._loop(connection, scheduler, recovery)
        finally:
            if connection.is_open:
                connection.close()

    def _loop(
        self, connection: BlockingConnection, scheduler: DueJobDispatcher, recovery: Recovery
    ) -> None:
        next_sweep = 0.0
        while not self.stop.is_set() and self.leadership.is_leader.is_set():
            if time.monotonic() >= next_sweep:
                recovery.sweep()
                next_sweep = time.monotonic() + RECOVERY_INTERVAL_SECONDS
            outcome = scheduler.tick()
            if outcome.sleep_ms > 0:
                self._wait_for_wake(min(outcome.sleep_ms, RECOVERY_INTERVAL_SECONDS * 1000))
            connection.process_data_events(0)

    def _wait_for_wake(self, sleep_ms: float) -> None:
        """Sleep until a job due now is created (the API pushes a wake-up) or time is up."""
        if sleep_ms < 1:
            return
        try:
            if self.redis.blpop([self.keys.wake], timeout=sleep_ms / 1000):
                self.redis.delete(self.keys.wake)
        except redis.RedisError as e:
            log.warning("wake-up wait failed (%s); sleeping instead", e)
            self.stop.wait(sleep_ms / 1000)


def run_dispatcher(settings: DispatcherSettings) -> None:
    """Run a dispatcher until SIGTERM or SIGINT."""
    setup_logging("dispatcher", settings.log_level, settings.log_json)
    dispatcher = Dispatcher(settings)

    def handle(signum: int, _frame: FrameType | None) -> None:
        log.info("received signal %d; stopping", signum)
        dispatcher.stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    log.info("dispatcher %s started", dispatcher.name)
    dispatcher.run()
    log.info("dispatcher %s stopped", dispatcher.name)
