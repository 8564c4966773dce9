"""``kairos dispatcher``: lease, trigger claims, precise firing, recovery, results."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pika.adapters.blocking_connection import BlockingConnection

from common.activity import ActivityPublisher
from common.alerts.rules import RuleCache
from common.broker import BatchPublisher, connect
from common.config import DispatcherSettings
from common.gc_freeze import freeze_startup_heap
from common.loadbalance import Strategy, WorkerChooser
from common.metrics import clear_worker_gauges
from common.runtime import ServiceStop, keep_serving, open_stores, start_service
from common.slots import ResultsLag
from common.topology import declare_core
from common.tracing.spans import start_tracing
from services.dispatcher.leadership.lease import RedisLease
from services.dispatcher.leadership.lease_thread import Leadership
from services.dispatcher.outcomes.results_thread import ResultsConsumer
from services.dispatcher.outcomes.started_keys import StartedKeys
from services.dispatcher.routing.route import Router
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender
from services.dispatcher.trigger.claim_thread import ClaimLoop
from services.dispatcher.trigger.fire import Firer, FireSettings
from services.dispatcher.trigger.wake_thread import WakeListener
from services.dispatcher.upkeep.retention import RetentionLoop
from services.dispatcher.upkeep.sweep import Upkeep, UpkeepSettings

log = logging.getLogger(__name__)

UPKEEP_INTERVAL_SECONDS = 1.0
# While due runs wait for free slots, the dispatch loop looks for room this often.
SLOT_POLL_SECONDS = 0.05
# A load on the timer waits at least this many times as long as the last one took.
LOAD_SHARE_INVERSE = 10
# The dispatch loop's name among the loops whose progress keeps the lease.
DISPATCH_LOOP = "dispatch"
# The check ``/readyz`` reports this dispatcher's leadership under.
LEADERSHIP_CHECK = "leadership"


@dataclass
class _Leading:
    """What the leader works with while it holds the lease."""

    connection: BlockingConnection
    directory: WorkerDirectory
    claims: ClaimLoop
    sender: ClaimSender
    publisher: BatchPublisher
    firer: Firer
    upkeep: Upkeep
    retention: RetentionLoop
    leading_still: Callable[[], bool]
    """False from the moment this lead ends (the lease stepped down or the process
    stops): every stage of a pass asks it, so what is left of the pass is the next
    lead's, and this process winds down to try for the lease again."""


@dataclass
class _Timers:
    """When the dispatch loop next sweeps and next loads scheduled executions."""

    next_sweep: float = 0.0
    next_load: float = 0.0


class Dispatcher:
    """One dispatcher process: dispatches while it leads, consumes results always."""

    def __init__(self, settings: DispatcherSettings, stop: threading.Event) -> None:
        self.settings = settings
        self.name = settings.dispatcher_id or f"{socket.gethostname()}-{os.getpid()}"
        # No ping before each transaction (it costs throughput): every loop of the
        # dispatcher starts again after a failed statement, and a disconnect drops the
        # whole pool, so a database restart costs one failed attempt per loop.
        self.stores = open_stores(settings, pool_size=5, pre_ping=False)
        self.tracing = start_tracing("dispatcher", settings.otel_endpoint)
        self.redis, self.engine = self.stores.redis, self.stores.engine
        self.clock, self.keys = self.stores.clock, self.stores.keys
        lease = RedisLease(self.redis, self.keys.dispatcher_lease, settings.lease_ttl_ms)
        self.leadership = Leadership(lease, stall_ms=settings.leader_stall_ms or None)
        self.progress = self.leadership.progress
        self.stop = stop
        if isinstance(stop, ServiceStop):
            stop.health.add_check(LEADERSHIP_CHECK, self.leadership.readiness)
        self.wake = WakeListener(self.redis, self.keys.wake, self.stop)
        self.results_lag = ResultsLag()

    def run(self) -> None:
        """Run until ``stop`` is set, then release the lease."""
        started = StartedKeys(
            self.stores.started_marks(),
            min(self.settings.recorded_started_ttl_seconds, self.settings.idempotency_ttl_seconds),
        )
        results = ResultsConsumer(
            self.settings,
            self.engine,
            self.clock,
            self.name,
            started,
            self.results_lag,
            alerts=RuleCache(self.engine),
        )
        results_thread = threading.Thread(target=results.run, args=(self.stop,), name="results")
        results_thread.start()
        # The console's overview reads what this process counted, minute by minute.
        activity = ActivityPublisher(self.redis, self.keys, self.clock)
        activity_thread = threading.Thread(
            target=activity.run, args=(self.stop,), name="activity", daemon=True
        )
        activity_thread.start()
        self.leadership.start()
        self.wake.start()
        try:
            keep_serving("dispatch loop", self._lead_while_leader, self.stop)
        finally:
            self.leadership.stop()
            results_thread.join(timeout=10)
            activity_thread.join(timeout=5)
            self.engine.dispose()

    def _lead_while_leader(self) -> None:
        """Dispatch while this dispatcher holds the lease; return while it does not."""
        self.leadership.ready.set()
        if self.leadership.is_leader.wait(0.2):
            # Until the last lead has wound down (threads joined, connection closed) no
            # lease is taken: it would be held with nothing dispatching.
            self.leadership.ready.clear()
            try:
                self._lead()
            except BaseException as e:
                # The lead failed (a store lost): a standby takes it at once, and this
                # process, not ready meanwhile, tries again after its back-off.
                self.leadership.step_down(f"the dispatch loop failed ({type(e).__name__})")
                raise
            self.leadership.ready.set()

    def _lead(self) -> None:
        # Counted from before the broker connection: a connect that hangs is a stall.
        self.progress.beat(DISPATCH_LOOP)
        try:
            connection = connect(self.settings, f"kairos dispatcher {self.name}")
        except BaseException:
            self.progress.forget(DISPATCH_LOOP)
            raise
        leading = None
        # This lead's own end, never cleared: a claim thread that outlives its join (a
        # MySQL statement hanging) must not take the next lead's signal for its own.
        ended = threading.Event()

        def leading_still() -> bool:
            return self._leading() and not ended.is_set()

        self.progress.beat(DISPATCH_LOOP)
        try:
            leading = self._build(connection, leading_still)
            self._share_workers(leading)
            leading.claims.start(leading_still)
            leading.retention.start(leading_still)
            self._loop(leading)
        finally:
            self.progress.forget(DISPATCH_LOOP)
            ended.set()
            if leading is not None:
                self._wind_down(leading)
            clear_worker_gauges()
            if connection.is_open:
                connection.close()

    def _wind_down(self, leading: _Leading) -> None:
        """Stop the lead's threads, waiting for them no longer than a lease's lifetime.

        A thread still in a statement by then is left to end by itself (it stops at its
        next look at ``leading_still``): the claim thread keeps this dispatcher from
        taking the lease until it has (its progress beat grows old), which ``/readyz``
        reports.
        """
        deadline = time.monotonic() + self.settings.lease_ttl_ms / 1000
        for name, join in (("claim", leading.claims.join), ("retention", leading.retention.join)):
            if not join(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "the %s thread of the last lead has not stopped within %.1f s; it stops "
                    "once its statement ends",
                    name,
                    self.settings.lease_ttl_ms / 1000,
                )
        # Rolls back what is queued, and any claim handed over later.
        leading.sender.close()

    def _build(self, connection: BlockingConnection, leading_still: Callable[[], bool]) -> _Leading:
        s = self.settings
        channel = connection.channel()
        declare_core(channel)
        publisher = BatchPublisher(channel)
        directory = WorkerDirectory(
            self.stores.workers(),
            connection,
            self.clock,
            s.heartbeat_stale_ms,
            s.slot_horizon_ms,
            results_lag=self.results_lag,
        )
        router = Router(directory, WorkerChooser(Strategy(s.strategy)))
        sender = ClaimSender(
            WorkerChooser(Strategy(s.strategy)), directory.sent, tracing=self.tracing
        )
        claimer = TriggerClaimer(
            self.engine,
            self.clock,
            s.batch_size,
            s.claim_window_ms,
            sender,
            self.tracing,
            alerts=RuleCache(self.engine),
        )
        fire = FireSettings(
            s.claim_window_ms, s.batch_size, s.fire_batch_size, aging_ms=s.priority_aging_ms
        )
        firer = Firer.on_stores(self.stores, publisher, router, fire, self.tracing)
        upkeep = Upkeep(self.stores, publisher, router, UpkeepSettings.of(s))
        retention_ms = int(s.retention_days * 86_400_000)
        retention = RetentionLoop(self.engine, self.stores.workers(), self.clock, retention_ms)
        claims = ClaimLoop(
            claimer, self.wake, s.batch_size, s.scan_interval_ms / 1000, self.progress
        )
        return _Leading(
            connection,
            directory,
            claims,
            sender,
            publisher,
            firer,
            upkeep,
            retention,
            leading_still,
        )

    def _leading(self) -> bool:
        return not self.stop.is_set() and self.leadership.is_leader.is_set()

    def _loop(self, leading: _Leading) -> None:
        timers = _Timers()
        while leading.leading_still():
            self.progress.beat(DISPATCH_LOOP)
            wait = self._step(leading, timers)
            self.progress.beat(DISPATCH_LOOP)
            leading.claims.claimed.wait(max(0.0, wait))

    def _step(self, leading: _Leading, timers: _Timers) -> float:
        """One pass of the dispatch loop; returns how long it may sleep. The pass stops
        between its stages once this dispatcher no longer leads."""
        # A batch due now goes before the upkeep, the worker view's reload and the load,
        # each of which can take milliseconds (tens with a backlog held).
        self._fire_newly_due(leading)
        if time.monotonic() >= timers.next_sweep and leading.leading_still():
            leading.upkeep.sweep(leading.leading_still)
            timers.next_sweep = time.monotonic() + UPKEEP_INTERVAL_SECONDS
        if not leading.leading_still():
            return 0.0
        self._share_workers(leading)
        # Cleared before the claim count is read and the open claims are taken: a claim
        # thread counts a pass, queues what it sends, then sets the event, so a pass
        # this step does not see sets the event again and the sleep below ends at once.
        leading.claims.claimed.clear()
        leading.sender.send_ready(leading.publisher)
        # What claims wrote SCHEDULED is read by key; a load, which ranks everything
        # that waits, runs on its timer or when an app's held runs are running low.
        leading.firer.add(leading.sender.take_scheduled())
        self._fire_newly_due(leading)
        self._load_on_time(leading, timers)
        # What the load brought that is due, and a second batch due at the same instant.
        self._fire_due(leading)
        if not leading.leading_still():
            return 0.0
        leading.firer.warm_up()
        # After the warm-up: a choice it made ahead of an instant holds claims off too.
        leading.sender.contended = leading.firer.claims_hold_off()
        leading.connection.process_data_events(0)
        return self._rest(leading, timers)

    def _load_on_time(self, leading: _Leading, timers: _Timers) -> None:
        """Load what waits, on the load's timer or when an app's held runs run low."""
        if not leading.leading_still():
            return
        if time.monotonic() >= timers.next_load or leading.firer.needs_load():
            began = time.monotonic()
            leading.firer.load()
            ended = time.monotonic()
            # A load ranks every run that waits: with a large backlog it takes tens of
            # milliseconds, so it takes at most a tenth of the loop's time.
            timers.next_load = ended + max(
                self.settings.scan_interval_ms / 1000, LOAD_SHARE_INVERSE * (ended - began)
            )

    def _rest(self, leading: _Leading, timers: _Timers) -> float:
        """How long the loop may sleep after a pass: until the next timer, the next due
        run, or (while runs wait for slots) the next look for room."""
        wait = min(timers.next_load, timers.next_sweep) - time.monotonic()
        due = leading.firer.next_wake()
        if due is not None:
            wait = min(wait, (due - self.clock.now_ms()) / 1000)
        if leading.firer.waiting():
            # Runs wait for slots: look again soon for the room finished runs free.
            wait = min(wait, SLOT_POLL_SECONDS)
        return wait

    def _fire_due(self, leading: _Leading) -> None:
        """Fire everything due now, one batch after another, while this dispatcher leads:
        with a backlog the batches come back to back for as long as slots free up."""
        while leading.leading_still() and leading.firer.fire_due():
            self.progress.beat(DISPATCH_LOOP)

    def _fire_newly_due(self, leading: _Leading) -> None:
        """Fire what has come due since the last pass; what only waits for a slot waits
        for the pass after the load (one pass over it a step)."""
        if leading.firer.newly_due():
            self._fire_due(leading)

    @staticmethod
    def _share_workers(leading: _Leading) -> None:
        """Give the claim thread the current view of the live workers."""
        live = leading.directory.live()
        # The directory's own list, new on each reload: the claim thread copies it when
        # it changes and counts its picks on the copy until then.
        leading.sender.workers = live
        leading.claims.handlers = frozenset(name for w in live for name in w.handlers)


def run_dispatcher(settings: DispatcherSettings) -> None:
    """Run a dispatcher until SIGTERM or SIGINT."""
    stop = start_service("dispatcher", settings, settings.metrics_port, settings.metrics_host)
    dispatcher = Dispatcher(settings, stop)
    log.info("dispatcher %s started", dispatcher.name)
    freeze_startup_heap()
    dispatcher.run()
    log.info("dispatcher %s stopped", dispatcher.name)
