"""The leader's upkeep sweep: every step that puts stranded work back on its way.

Run by the dispatch loop about once a second while this dispatcher leads. Each step is
safe to repeat and to run on any dispatcher that leads next. Retention is no step of
it: the leader prunes in a thread of its own (``upkeep.retention.RetentionLoop``),
whose deletes would otherwise take the dispatch loop's time from firing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.alerts.rules import RuleCache
from common.broker import Publisher
from common.config import DispatcherSettings
from common.db.rescue_store import MySqlRescueTransactions
from common.db.retry import ConflictRetry
from common.store_errors import is_store_outage
from common.stores import Stores
from services.dispatcher.outcomes.callbacks import republish_stale_deliveries
from services.dispatcher.routing.route import Router
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.upkeep.alerting import LeaderAlerts
from services.dispatcher.upkeep.gauges import LeaderGauges
from services.dispatcher.upkeep.recall import Recall, RecallSettings
from services.dispatcher.upkeep.reconcile import Reconciler, ReconcileSettings
from services.dispatcher.upkeep.rescue import Rescue, RescueSettings
from services.dispatcher.upkeep.timeouts import Timeouts, TimeoutSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpkeepSettings:
    """The figures the sweep's steps work with, in milliseconds."""

    rescue: RescueSettings
    timeouts: TimeoutSettings
    pending_republish_ms: int
    reconcile: ReconcileSettings | None
    recall: RecallSettings

    @classmethod
    def of(cls, s: DispatcherSettings) -> UpkeepSettings:
        """The sweep's settings from the dispatcher's."""
        reconcile = None
        if s.reconcile_after_seconds > 0:
            after_ms = int(s.reconcile_after_seconds * 1000)
            reconcile = ReconcileSettings(after_ms, s.idempotency_ttl_seconds)
        return cls(
            RescueSettings(s.heartbeat_stale_ms, int(s.forget_workers_after_hours * 3_600_000)),
            TimeoutSettings(s.timeout_grace_ms, s.idempotency_ttl_seconds * 1000),
            s.pending_republish_ms,
            reconcile,
            RecallSettings(s.idempotency_ttl_seconds),
        )

    @property
    def reconcile_interval_s(self) -> float:
        """A quarter of the reconciler's threshold, between 1 s and 10 s, so that a worker
        heartbeat (every 5 s by default) lands between two of its sweeps."""
        assert self.reconcile is not None
        return min(10.0, max(1.0, self.reconcile.after_ms / 4000))


class Upkeep:
    """Runs the upkeep steps; ``sweep`` is called by the dispatch loop."""

    def __init__(
        self,
        stores: Stores,
        publisher: Publisher,
        router: Router[WorkerDirectory],
        settings: UpkeepSettings,
    ) -> None:
        self._stores = stores
        self._marks = stores.started_marks()
        self._publisher = publisher
        self._settings = settings
        self._alerts = LeaderAlerts(
            stores.engine, publisher, stores.clock, RuleCache(stores.engine)
        )
        self.rescue = Rescue.on_stores(
            stores, publisher, router, settings.rescue, self._alerts.worker_dead
        )
        directory = router.directory
        self._reconciler = None
        if settings.reconcile is not None:
            self._reconciler = Reconciler(stores, publisher, directory, settings.reconcile)
        self._next_reconcile = 0.0
        moves = MySqlRescueTransactions(stores.engine)
        self._recall = Recall(moves, self._marks, directory, settings.recall)
        self._timeouts = Timeouts(stores, publisher, settings.timeouts)
        self._gauges = LeaderGauges(stores.apps(), stores.workers(), directory, stores.clock)

    def sweep(self, leading_still: Callable[[], bool] = lambda: True) -> None:
        """Run every step once (the reconciler at its own, slower pace), stopping between
        steps once ``leading_still()`` says this dispatcher no longer leads.

        A step that fails for a reason of its own is logged and the others still run;
        a store outage stops the sweep, and the dispatch loop starts again.
        """
        s, engine, clock = self._settings, self._stores.engine, self._stores.clock
        publisher = self._publisher
        # First: the started epoch must date from before anything this leader sends, or
        # a fresh (or flushed) Redis makes the first executions look dispatched before
        # a loss of their started keys (common/started_marks.py).
        steps: list[tuple[str, Callable[[], object]]] = [
            ("epoch", lambda: self._marks.epoch(clock.now_ms())),
            ("rescue", self.rescue.rescue_dead_workers),
            ("draining", self.rescue.move_off_draining_workers),
            ("recall", self._recall.recall_surplus),
            ("timeouts", self._timeouts.sweep),
            (
                "callbacks",
                lambda: republish_stale_deliveries(
                    engine, publisher, clock, s.pending_republish_ms
                ),
            ),
            ("alert summaries", self._alerts.send_summaries),
            ("gauges", self._gauges.refresh),
        ]
        for name, step in steps:
            if not leading_still():
                return
            self._run(name, step)
        if self._reconciler is not None and time.monotonic() >= self._next_reconcile:
            if not leading_still():
                return
            self._next_reconcile = time.monotonic() + s.reconcile_interval_s
            self._run("reconcile", self._reconciler.sweep)

    @staticmethod
    def _run(name: str, step: Callable[[], object]) -> None:
        """Run one step, again in place after a lock conflict; one failing on its own
        data is logged, an outage goes up. Every step is safe to run again."""
        try:
            ConflictRetry("sweep").run(step)
        except Exception as e:
            if is_store_outage(e):
                raise
            log.exception("upkeep step %s failed; the others go on", name)
