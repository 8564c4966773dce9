"""The reconciler: finds executions QUEUED far longer than they should be, and settles them.

Run by the leader, on live workers as well as dead ones (the dead-worker sweep covers
those too). For each execution QUEUED longer than ``after_ms``:

- its worker stored how it ended (the started key holds the result): that result is
  published again through the results path, and recorded (cause ``unreported_result``);
- a worker took it and has not stored an end: the run is still going; left alone;
- no worker ever took it: it is settled only once its worker provably holds nothing
  that could be it. Its queue had no ready message at one sweep, and a heartbeat
  counted at or after that sweep says the worker held no unacked message: whatever
  the execution's message was, it is gone (rejected, dropped). The reconciler then
  takes the started key itself, so a copy that turns up later is dropped rather than
  run, and records LOST, retried if the job allows (cause ``never_started``);
- a recall fenced it and its leader went before moving it (``upkeep.recall``): no copy
  can run, so it goes back to the firer (cause ``unfinished_recall``).

Each settlement is logged with job and execution ids and counted in
``kairos_executions_reconciled_total{cause}``: in normal operation it stays at zero, so
a regression anywhere on the path shows up instead of hiding.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from common.broker import Publisher
from common.clock import CLOCK_SLACK_MS
from common.db.executions_with_job import SLOT_WAIT
from common.db.rescue_store import MySqlRescueTransactions
from common.db.stuck_executions import Page, StuckExecution, queued_before
from common.messages import ExecutionResult
from common.metrics import EXECUTIONS_RECONCILED
from common.result_messages import publish_results, stand_in_results, stored_result
from common.started_marks import RECALLED, RECONCILER, RunState
from common.states import ExecutionStatus
from common.stores import Stores
from services.dispatcher.routing.workers import WorkerDirectory

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500
# While more results than this wait, stored outcomes are most likely on their way:
# publishing them again would only add to the backlog.
RESULTS_BACKLOG_LIMIT = 1_000
NEVER_STARTED = "never started: its dispatch message is gone from its worker (reconciled)"


@dataclass(frozen=True)
class ReconcileSettings:
    """How long an execution may stay QUEUED before it is looked at, and for how long a
    fence set on a never-started execution keeps late copies from running."""

    after_ms: int
    fence_ttl_seconds: int


class Reconciler:
    """Looks at long-QUEUED executions once a sweep; every step is safe to repeat."""

    def __init__(
        self,
        stores: Stores,
        publisher: Publisher,
        directory: WorkerDirectory,
        settings: ReconcileSettings,
    ) -> None:
        self._engine = stores.engine
        self._moves = MySqlRescueTransactions(stores.engine)
        self._publisher = publisher
        self._directory = directory
        self._worker_marks, self._clock = stores.worker_marks(), stores.clock
        self._marks = stores.started_marks()
        self._settings = settings
        # Worker id -> the cluster time its queue was first seen with no ready message,
        # in the run of sweeps that saw it so.
        self._quiet_since: dict[str, int] = {}
        # A sweep reads one page of the long-QUEUED executions, the next sweep the page
        # after it: runs still going (left alone) would otherwise fill every sweep's read
        # and hide what slipped behind them. ``_seen``: the workers the pages of this
        # round showed, whose quiet times the next round keeps.
        self._page: Page | None = None
        self._seen: set[str] = set()

    def sweep(self) -> None:
        """Look at the next page of the longest-QUEUED executions and settle what has
        slipped; after the last page, start again from the first."""
        now = self._clock.now_ms()
        with self._engine.connect() as conn:
            rows = queued_before(conn, now - self._settings.after_ms, SWEEP_LIMIT, self._page)
        self._next_page(rows)
        if not rows:
            return
        if self._directory.results_backlog() > RESULTS_BACKLOG_LIMIT:
            self._quiet_since.clear()
            return
        marks = self._marks.read_runs([r.execution_id for r in rows])
        ended: list[ExecutionResult] = []
        unstarted: list[StuckExecution] = []
        fenced: list[StuckExecution] = []
        recalled: list[StuckExecution] = []
        for row, mark in zip(rows, marks, strict=True):
            state = mark.state
            if state is RunState.ENDED_UNRECORDED:
                assert mark.outcome is not None  # what ENDED_UNRECORDED means
                ended.append(stored_result(mark.outcome, row, now))
            elif state is RunState.NEVER_STARTED:
                unstarted.append(row)
            elif mark.owner == RECONCILER:
                # Fenced by an earlier sweep whose LOST report did not land.
                fenced.append(row)
            elif mark.owner == RECALLED:
                # Fenced by a recall whose leader went before its commit: no copy of it
                # can run, so it goes back to the firer as the recall meant it to.
                recalled.append(row)
        self._finish_recalls(recalled)
        self._record_stored(ended)
        self._settle_lost([*fenced, *self._fence(self._quiet(unstarted, now))], now)

    def _finish_recalls(self, rows: Sequence[StuckExecution]) -> None:
        """Give back to the firer the rows a recall fenced but did not move."""
        by_worker: dict[str, list[str]] = {}
        for row in rows:
            if row.worker_id is not None:
                by_worker.setdefault(row.worker_id, []).append(row.execution_id)
        for worker_id, ids in by_worker.items():
            with self._moves.transaction() as store:
                moved = store.recall(
                    sorted(store.lock_queued_on(ids, worker_id)), worker_id, SLOT_WAIT
                )
            log.warning(
                "%d executions fenced by an unfinished recall given back to the firer",
                moved,
                extra={"worker_id": worker_id},
            )
            EXECUTIONS_RECONCILED.labels(cause="unfinished_recall").inc(moved)

    def _next_page(self, rows: Sequence[StuckExecution]) -> None:
        """Where the next sweep reads from; at the end of a round, forget the quiet times
        of workers no page of it showed."""
        self._seen.update(r.worker_id for r in rows if r.worker_id is not None)
        if len(rows) == SWEEP_LIMIT:
            self._page = Page(rows[-1].since_ms, rows[-1].id)
            return
        self._page = None
        self._quiet_since = {w: t for w, t in self._quiet_since.items() if w in self._seen}
        self._seen = set()

    def _record_stored(self, results: Sequence[ExecutionResult]) -> None:
        self._publish(
            results,
            "unreported_result",
            "execution ended but its result was never recorded; recording it",
        )

    def _quiet(self, rows: Sequence[StuckExecution], now: int) -> list[StuckExecution]:
        """The rows whose live worker provably holds nothing that could be them."""
        by_worker: dict[str, list[StuckExecution]] = {}
        for row in rows:
            if row.worker_id is not None:
                by_worker.setdefault(row.worker_id, []).append(row)
        live = {w.worker_id for w in self._directory.live()}
        return [
            row
            for worker_id, waiting in by_worker.items()
            if worker_id in live and self._holds_nothing(worker_id, now)
            for row in waiting
        ]

    def _settle_lost(self, rows: Sequence[StuckExecution], now: int) -> None:
        results = stand_in_results(rows, ExecutionStatus.LOST, NEVER_STARTED, now)
        self._publish(results, "never_started", "execution never started; recording it LOST")

    def _publish(self, results: Sequence[ExecutionResult], cause: str, what: str) -> None:
        """Publish results through the results path; log and count each."""
        if not results:
            return
        publish_results(self._publisher, RECONCILER, results)
        for result in results:
            log.warning(
                "%s (worker %s)",
                what,
                result.worker_id,
                extra={"job_id": result.job_id, "execution_id": result.execution_id},
            )
        EXECUTIONS_RECONCILED.labels(cause=cause).inc(len(results))

    def _holds_nothing(self, worker_id: str, now: int) -> bool:
        """True once the worker's queue was empty at one sweep and a later heartbeat
        says the worker held nothing: no message of it can still be on its way."""
        counts = self._directory.queue_counts(worker_id)
        if counts is None or counts[0] != 0:
            self._quiet_since.pop(worker_id, None)
            return False
        since = self._quiet_since.setdefault(worker_id, now)
        held = self._worker_marks.held(worker_id)
        if held is None or held.count != 0:
            return False
        return held.at_ms > since + CLOCK_SLACK_MS

    def _fence(self, rows: Sequence[StuckExecution]) -> list[StuckExecution]:
        """Take the started key of each execution; the ones taken can never run now."""
        ids = [row.execution_id for row in rows]
        taken = self._marks.fence(ids, RECONCILER, self._settings.fence_ttl_seconds)
        return [row for row, ok in zip(rows, taken, strict=True) if ok]
