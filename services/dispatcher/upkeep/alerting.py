"""The leader's part in alerts: workers presumed dead told once per death, and the
summaries of events kept back once their window is over."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from common.alerts.firing import send_summaries
from common.alerts.kinds import AlertKind
from common.alerts.rules import RuleSource
from common.alerts.system_alerts import record_worker_gone, worker_gone_event
from common.broker import Publisher
from common.clock import ClusterClock
from common.db.workers import WorkerRecord
from services.dispatcher.outcomes.callbacks import publish_deliveries


class LeaderAlerts:
    """Fires WORKER_GONE as the rescue finds dead workers, and sends the summaries due
    at each sweep; both write through MySQL (the states there say what was told, so
    a new leader tells nothing twice)."""

    def __init__(
        self, engine: Engine, publisher: Publisher, clock: ClusterClock, rules: RuleSource
    ) -> None:
        self._engine = engine
        self._publisher = publisher
        self._clock = clock
        self._rules = rules
        # The deaths this leader settled already (worker id, last heartbeat): the rescue
        # sees a dead worker at every sweep until it is forgotten, and asks no query.
        self._told: set[tuple[str, int]] = set()

    def worker_dead(self, worker: WorkerRecord) -> None:
        """A worker the rescue found dead (heartbeat stale, no consumer on its queue)."""
        death = (worker.worker_id, worker.last_heartbeat)
        if death in self._told:
            return
        rules = [r for r in self._rules.rules() if AlertKind.WORKER_GONE in r.kinds]
        if rules:
            now = self._clock.now_ms()
            event = worker_gone_event(worker.worker_id, worker.hostname, worker.last_heartbeat, now)
            with self._engine.begin() as conn:
                sent = record_worker_gone(conn, rules, [event], now)
            publish_deliveries(self._engine, self._publisher, self._clock, sent)
        self._told.add(death)

    def send_summaries(self) -> None:
        """The summaries of events kept back whose window is over."""
        rules = self._rules.rules()
        if not rules:
            return
        with self._engine.begin() as conn:
            sent = send_summaries(conn, rules, self._clock.now_ms())
        publish_deliveries(self._engine, self._publisher, self._clock, sent)
