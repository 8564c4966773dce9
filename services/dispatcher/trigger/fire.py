"""Firing SCHEDULED executions at their time: hold them in a heap, send each when due.

Executions are loaded a short window ahead, so a trigger leaves for its worker within
milliseconds of its time instead of waiting for the next scan. The database stays the
truth: a fired execution is marked QUEUED in the same transaction that locked it, and
anything not fired (this dispatcher died, no worker was live) is still SCHEDULED and is
loaded again by the next pass of whichever dispatcher leads.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection, Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.db import executions
from common.db.retry import retry_lock_conflicts
from common.loadbalance import WorkerChooser
from common.metrics import TRIGGERS_SKIPPED, observe_dispatched
from common.schedule import (
    MisfirePolicy,
    OverlapPolicy,
    late_fire_skip_reason,
    overlap_skip_reason,
)
from common.states import ExecutionStatus, JobStatus
from services.dispatcher.trigger.dispatch import Assignment, dispatch, pack_dispatches
from services.dispatcher.upkeep.workers import WorkerDirectory

log = logging.getLogger(__name__)

# How long before a due time the firer refreshes its view of the workers: the refresh
# (a heartbeat query and a queue check per worker) took 5-25 ms, paid at the due time
# otherwise.
WARM_UP_MS = 100


class Firer:
    """Holds the executions due soon and fires them at their ``scheduled_at``."""

    def __init__(
        self,
        engine: Engine,
        publisher: BatchPublisher,
        directory: WorkerDirectory,
        chooser: WorkerChooser,
        clock: ClusterClock,
        window_ms: int,
        batch_size: int,
        fire_batch_size: int = 2_000,
    ) -> None:
        self._engine = engine
        self._publisher = publisher
        self._directory = directory
        self._chooser = chooser
        self._clock = clock
        self._window_ms = window_ms
        self._batch_size = batch_size
        self._fire_batch_size = fire_batch_size
        self._heap: list[tuple[int, str]] = []
        self._held: dict[str, Any] = {}

    def load(self) -> int:
        """Read SCHEDULED executions due within the window; returns how many were new.

        Rows already held are read again (they are still SCHEDULED until fired), so the
        read is capped at twice a batch beyond what is held.
        """
        until = self._clock.now_ms() + self._window_ms
        with self._engine.connect() as conn:
            rows = executions.scheduled_until(conn, until, len(self._held) + self._batch_size)
        new = [r for r in rows if r.execution_id not in self._held]
        for row in new:
            self._held[row.execution_id] = row
            heapq.heappush(self._heap, (int(row.scheduled_at), row.execution_id))
        return len(new)

    def next_due(self) -> int | None:
        """When the earliest held execution is due."""
        return self._heap[0][0] if self._heap else None

    def next_wake(self) -> int | None:
        """When the dispatch loop should next call: ``warm_up`` or ``fire_due`` is due."""
        due = self.next_due()
        if due is None:
            return None
        return due - WARM_UP_MS if due - WARM_UP_MS > self._clock.now_ms() else due

    def warm_up(self) -> None:
        """Refresh the worker view now if it would be stale when the next execution is due."""
        due = self.next_due()
        if due is None:
            return
        ahead_ms = due - self._clock.now_ms()
        if 0 < ahead_ms <= WARM_UP_MS:
            self._directory.live(fresh_for=(ahead_ms + WARM_UP_MS) / 1000)

    def fire_due(self) -> int:
        """Send held executions whose time has come, up to one fire batch; returns how many.

        Everything due goes in one transaction and one publish: a second, smaller batch
        due at the same instant would wait for the first one's round trips.
        """
        now = self._clock.now_ms()
        due: list[Any] = []
        while self._heap and self._heap[0][0] <= now and len(due) < self._fire_batch_size:
            _, execution_id = heapq.heappop(self._heap)
            row = self._held.pop(execution_id, None)
            if row is not None:
                due.append(row)
        return self._fire(due) if due else 0

    @retry_lock_conflicts
    def _fire(self, due: Sequence[Any]) -> int:
        now = self._clock.now_ms()
        with self._engine.begin() as conn:
            still = executions.lock_still_scheduled(conn, [int(r.id) for r in due])
            rows = [r for r in due if int(r.id) in still]
            gone = {
                int(r.id): "cancelled: the job was cancelled before this run was sent"
                for r in rows
                if r.job_status == JobStatus.CANCELLED
            }
            executions.mark_skipped(conn, gone, now, ExecutionStatus.CANCELLED)
            rows = [r for r in rows if int(r.id) not in gone]
            skips = self._late_skips(rows, now) | self._overlap_skips(conn, rows)
            executions.mark_skipped(conn, skips, now)
            assignments = self._assign([r for r in rows if int(r.id) not in skips])
            # Marked before the publish, while the workers are still idle: written after
            # it, the marks would compete for the CPU and the row locks with the runs
            # and results the publish sets off (bench/RESULTS.md).
            executions.mark_queued(conn, {a.row_id: a.worker_id for a in assignments}, now)
            returned = dispatch(conn, self._publisher, pack_dispatches(assignments, now))
        observe_dispatched(assignments, returned, now)
        TRIGGERS_SKIPPED.labels(stage="fire").inc(len(skips))
        for row in rows:
            if int(row.id) in skips:
                log.info(skips[int(row.id)], extra={"execution_id": row.execution_id})
        return len(assignments) - len(returned)

    @staticmethod
    def _late_skips(rows: Sequence[Any], now: int) -> dict[int, str]:
        """Misfire policy for claimed triggers fired late (their dispatcher died first)."""
        latest: dict[int, int] = {}
        for row in rows:
            if row.attempt == 1 and not row.manual:
                latest[row.job_id] = max(latest.get(row.job_id, 0), int(row.trigger_time))
        skips: dict[int, str] = {}
        for row in rows:
            threshold = int(row.misfire_threshold_seconds) * 1000
            late_ms = now - int(row.trigger_time)
            if late_ms <= threshold or row.attempt != 1 or row.manual:
                continue
            later_overdue = latest[row.job_id] > int(row.trigger_time) or (
                row.job_status == JobStatus.WAITING
                and row.next_trigger_time is not None
                and now - int(row.next_trigger_time) > threshold
            )
            reason = late_fire_skip_reason(
                MisfirePolicy(row.misfire_policy), threshold, late_ms, later_overdue
            )
            if reason is not None:
                skips[int(row.id)] = reason
        return skips

    @staticmethod
    def _overlap_skips(conn: Connection, rows: Sequence[Any]) -> dict[int, str]:
        """First attempts of FORBID jobs whose job has a run in a worker queue or going."""
        candidates = [
            r
            for r in rows
            if r.overlap_policy == OverlapPolicy.FORBID and r.attempt == 1 and not r.manual
        ]
        busy = executions.jobs_with_runs(conn, [r.job_id for r in candidates])
        skips: dict[int, str] = {}
        for row in candidates:
            reason = overlap_skip_reason(OverlapPolicy.FORBID, row.job_id in busy)
            if reason is not None:
                skips[int(row.id)] = reason
        return skips

    def _assign(self, rows: Sequence[Any]) -> list[Assignment]:
        live = self._directory.live()
        assignments = []
        for row in rows:
            worker = self._chooser.choose(live, row.handler)
            if worker is not None:
                assignments.append(Assignment.of(row, worker.worker_id))
        return assignments
