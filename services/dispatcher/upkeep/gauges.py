"""Gauges only the leading dispatcher can give, refreshed by its upkeep sweep: the depth
of the namespace's own queues and how many live workers run each handler.

They feed the alerts on a results backlog, on dead callbacks and on a handler no live
worker runs (deploy/prometheus/alerts.yml).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from common.clock import Clock
from common.db.apps import AppTransactions
from common.db.workers import WorkerTransactions
from common.metrics import (
    APP_LABELS,
    EXECUTIONS_DISPATCHED,
    AppLabels,
    set_app_standing,
    set_core_queue_depth,
    set_handler_live_workers,
)
from common.states import WorkerState
from common.topology import (
    CALLBACK_PACKS_QUEUE,
    CALLBACKS_DEAD_QUEUE,
    CALLBACKS_QUEUE,
    RESULTS_DEAD_QUEUE,
    RESULTS_QUEUE,
)
from services.dispatcher.routing.workers import WorkerDirectory

CORE_QUEUES = (
    RESULTS_QUEUE,
    RESULTS_DEAD_QUEUE,
    CALLBACKS_QUEUE,
    CALLBACK_PACKS_QUEUE,
    CALLBACKS_DEAD_QUEUE,
)
REFRESH_SECONDS = 5.0


class LeaderGauges:
    """Refreshes the gauges at most every ``every`` seconds; apps are labelled by
    ``labels`` (the process's own, unless a test gives it its own)."""

    def __init__(
        self,
        apps: AppTransactions,
        workers: WorkerTransactions,
        directory: WorkerDirectory,
        clock: Clock,
        every: float = REFRESH_SECONDS,
        labels: AppLabels = APP_LABELS,
    ) -> None:
        self._apps = apps
        # The process's label values, shared with the other per-app metrics so that an
        # app keeps one label across them (``common.metrics.AppLabels``).
        self._labels = labels
        self._workers = workers
        self._clock = clock
        self._directory = directory
        self._every = every
        self._next = 0.0

    def refresh(self) -> None:
        """Read the queues' depths and the handlers' live workers, when it is time."""
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self._every
        for queue in CORE_QUEUES:
            set_core_queue_depth(queue, self._directory.queue_ready(queue))
        set_handler_live_workers(self._handler_counts())
        self._app_standing()

    def _app_standing(self) -> None:
        """Each app's runs waiting for a slot and going."""
        with self._apps.reading() as apps:
            standing = apps.app_activity(self._clock.now_ms())
        set_app_standing(
            self._labels,
            {a.app_id: a.waiting for a in standing if a.waiting or a.running},
            {a.app_id: a.running for a in standing if a.waiting or a.running},
        )

    def _handler_counts(self) -> dict[str, int]:
        """Every handler a worker not yet forgotten registered, with its live workers."""
        with self._workers.reading() as workers:
            known_workers = workers.all_workers()
        forget_worker_series(w.worker_id for w in known_workers if w.state is WorkerState.FORGOTTEN)
        known = {
            name
            for worker in known_workers
            if worker.state is not WorkerState.FORGOTTEN
            for name in worker.handlers
        }
        live = Counter(name for worker in self._directory.live() for name in worker.handlers)
        return {name: live.get(name, 0) for name in sorted(known)}


def forget_worker_series(worker_ids: Iterable[str]) -> None:
    """Drop the series labelled with these workers' ids (forgotten, or deleted): each
    series lives as long as the process, so workers that come and go (one id per pod)
    would grow the scrape without bound."""
    counted = {
        sample.labels["worker_id"]
        for family in EXECUTIONS_DISPATCHED.collect()
        for sample in family.samples
    }
    for worker_id in set(worker_ids) & counted:
        EXECUTIONS_DISPATCHED.remove(worker_id)
