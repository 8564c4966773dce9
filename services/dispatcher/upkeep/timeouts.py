"""Timeouts no worker reported: runs past their job's timeout plus a grace, counted from
their start, recorded TIMED_OUT on their worker's behalf (retried if the job allows).

A run's start is read from its started key: the worker sets it, with the cluster's
idempotency TTL, when the run starts, so its age is that TTL minus the time it has
left. An execution no worker has started yet (it waits in a deep queue) is not timed
out on its dispatch's clock: only once it has waited ``UNSTARTED_FACTOR`` times its
timeout, and a worker that gets it later reads its row first and does not run it
(``services/worker/start_guard.py``). One whose key holds an outcome, or a fence, is
being settled already and is left alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from common.broker import Publisher
from common.db import executions_with_job
from common.db.executions_with_job import ExecutionWithJob
from common.db.stuck_executions import Page
from common.result_messages import publish_results, stand_in_results
from common.started_marks import RunMark, RunState
from common.states import ExecutionStatus
from common.stores import Stores

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500
STAND_IN_SENDER = "dispatcher"
# An execution no worker has started counts as timed out only after this many times
# its timeout since its dispatch: a worker's backlog, not a hung run, holds it.
UNSTARTED_FACTOR = 10


@dataclass(frozen=True)
class TimeoutSettings:
    """The grace past a job's timeout, and the TTL workers give started keys (ms)."""

    grace_ms: int
    started_ttl_ms: int


def past_timeout(
    row: ExecutionWithJob, mark: RunMark, now_ms: int, settings: TimeoutSettings
) -> bool:
    """Whether the run of ``row`` is past its timeout plus grace, counted from its start."""
    assert row.timeout_seconds is not None
    timeout_ms = row.timeout_seconds * 1000
    dispatched = row.dispatched_at if row.dispatched_at is not None else now_ms
    state = mark.state
    if state is RunState.NEVER_STARTED:
        return dispatched + timeout_ms * UNSTARTED_FACTOR + settings.grace_ms < now_ms
    if state is not RunState.RUNNING:
        return False
    started = dispatched
    if mark.left_ms is not None:
        # A worker with a longer TTL than this dispatcher's makes the start look later:
        # the timeout comes late, never early.
        started = max(dispatched, now_ms - (settings.started_ttl_ms - mark.left_ms))
    return started + timeout_ms + settings.grace_ms < now_ms


class Timeouts:
    """The timeout sweep, paging through the candidates from one sweep to the next."""

    def __init__(self, stores: Stores, publisher: Publisher, settings: TimeoutSettings):
        self._stores = stores
        self._marks = stores.started_marks()
        self._publisher = publisher
        self._settings = settings
        self._after: Page | None = None

    def sweep(self) -> None:
        """Record TIMED_OUT for runs past their job's timeout whose worker never reported;
        one page of candidates a sweep, starting over once the last page was read."""
        now = self._stores.clock.now_ms()
        with self._stores.engine.connect() as conn:
            page = executions_with_job.overdue(
                conn, now, self._settings.grace_ms, SWEEP_LIMIT, self._after
            )
        last = page[-1] if len(page) == SWEEP_LIMIT else None
        self._after = None if last is None else Page(int(last.dispatched_at or 0), last.id)
        if not page:
            return
        marks = self._marks.read_runs([r.execution_id for r in page], with_ttl=True)
        rows = [
            r for r, m in zip(page, marks, strict=True) if past_timeout(r, m, now, self._settings)
        ]
        if rows:
            log.warning("%d executions passed their timeout without a report", len(rows))
            why = "no result within the job's timeout"
            results = stand_in_results(rows, ExecutionStatus.TIMED_OUT, why, now)
            publish_results(self._publisher, STAND_IN_SENDER, results)


def time_out_overdue(stores: Stores, publisher: Publisher, settings: TimeoutSettings) -> None:
    """One sweep from the first page (``Timeouts.sweep``)."""
    Timeouts(stores, publisher, settings).sweep()
