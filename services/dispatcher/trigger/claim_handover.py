"""Sending the triggers a claim finds already due, in the claim's own transaction.

A trigger claimed after its time (a backlog, a job created to run now) is not written
SCHEDULED to be read back by the firer, locked, marked QUEUED and only then sent: that
would take two more statements per batch and one more rewrite of every status index per
execution. Here the claim writes such executions QUEUED on their worker and leaves
its transaction open; the dispatch loop, which owns the broker connection (pika is
not thread-safe), publishes them and then commits. Meanwhile the claim thread claims
the next batch on another connection: its due scan skips the rows the open claims
hold (``FOR UPDATE SKIP LOCKED``). Triggers due later are written SCHEDULED and fired
at their time.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection, RootTransaction

from common.broker import Publisher
from common.db.apps import DEFAULT_POLICY, AppPolicy, MySqlAppStore
from common.db.due_jobs import DueJob
from common.db.executions import (
    UNFINISHED,
    NewExecution,
    insert_executions_with_ids,
    jobs_with_runs,
)
from common.db.executions_with_job import ExecutionWithJob
from common.loadbalance import WorkerChooser, WorkerLoad
from common.metrics import observe_dispatched
from common.schedule import OverlapPolicy
from common.states import ExecutionStatus
from common.tracing.spans import NO_TRACING, Tracing
from services.dispatcher.routing.dispatch import (
    Assignment,
    DispatchPacks,
    dispatch,
    pack_dispatches,
)
from services.dispatcher.routing.route import Router
from services.dispatcher.trigger.fire_rules import app_fence

log = logging.getLogger(__name__)

# How often the claim thread looks again whether the dispatch loop took the open claim
# before it (one is queued at most) and whether it still leads.
HAND_OVER_POLL_S = 0.01


@dataclass(frozen=True, slots=True)
class Written:
    """An execution a claim wrote SCHEDULED, and its primary key."""

    row: NewExecution
    key: int


@dataclass
class OpenClaim:
    """A claim whose transaction is still open, holding executions written QUEUED."""

    connection: Connection
    transaction: RootTransaction
    sent: list[Assignment]
    packs: DispatchPacks
    now_ms: int
    after_commit: Callable[[], None] = lambda: None

    def send(self, publisher: Publisher) -> int:
        """Publish the executions, put back what the broker returned, commit; how many landed.

        If the commit fails after the publish, the messages are out but the rows are
        not: the jobs are claimed again under the same execution ids (see
        ``trigger_execution_id``), so the copies are one execution, which runs once.
        """
        try:
            returned = dispatch(self.connection, publisher, self.packs)
            self.transaction.commit()
        except BaseException:
            self.abandon()
            raise
        self.connection.close()
        observe_dispatched(self.sent, returned, self.now_ms)
        self.after_commit()
        return len(self.sent) - len(returned)

    def abandon(self) -> None:
        """Roll the claim back: its jobs are due again for the next claim."""
        try:
            if self.transaction.is_active:
                self.transaction.rollback()
        finally:
            self.connection.close()


class WorkerCopy:
    """The claim thread's own copy of the dispatch loop's worker view (``LiveWorkers``).

    ``workers`` is the dispatch loop's latest view. The copy is kept, with the claims'
    picks counted on it, until a new view comes, so the two threads never share a
    chooser's counts; the picks made on a copy replaced go to ``on_picks``.
    """

    def __init__(self, on_picks: Callable[[list[WorkerLoad]], None]) -> None:
        self.workers: Sequence[WorkerLoad] = ()
        self._on_picks = on_picks
        self._view: Sequence[WorkerLoad] = ()
        self._copies: list[WorkerLoad] = []

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        """The copy of the latest view (``fresh_for`` is the dispatch loop's to honour)."""
        view = self.workers
        if view is not self._view:
            self._on_picks(self._copies)
            self._view = view
            self._copies = [dataclasses.replace(w, picked=0, picked_extra=0) for w in view]
        return self._copies


class ClaimSender:
    """Writes a claim's due executions QUEUED and hands the open claim to the dispatch loop.

    ``workers`` is the dispatch loop's latest view of the live workers; the claim thread
    routes on its own copy of it (``WorkerCopy``), through a ``Router`` of its own.
    """

    def __init__(
        self,
        chooser: WorkerChooser,
        on_picks: Callable[[list[WorkerLoad]], None] = lambda picked: None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.view = WorkerCopy(on_picks)
        self._tracing = tracing
        self._router = Router(self.view, chooser)
        # Set by the dispatch loop while due runs wait for a free slot: then the fair
        # share (the firer) alone decides who goes next, and claims send nothing.
        self.contended = False
        self._ready: queue.Queue[OpenClaim] = queue.Queue(maxsize=1)
        self._closed = False
        self._lock = threading.Lock()
        # Executions claims committed SCHEDULED, for the firer to hold.
        self._scheduled: list[ExecutionWithJob] = []

    @property
    def workers(self) -> Sequence[WorkerLoad]:
        """The dispatch loop's latest view of the live workers (set by it)."""
        return self.view.workers

    @workers.setter
    def workers(self, view: Sequence[WorkerLoad]) -> None:
        self.view.workers = view

    def insert(
        self,
        conn: Connection,
        created: Sequence[NewExecution],
        jobs: Mapping[int, DueJob],
        now_ms: int,
    ) -> tuple[list[Assignment], DispatchPacks, list[Written]]:
        """Insert ``created`` in the caller's transaction; return what is to be sent,
        and what is written SCHEDULED, with its key (for ``scheduled`` once committed).

        Due executions go QUEUED to a live worker with room in its queue; the rest are
        written SCHEDULED for the firer: those due later, those no worker has room for,
        those of FORBID jobs with another run scheduled or going, and those whose app
        has a cap or a fence in the way. While due runs wait for slots (``contended``)
        every one is left to the firer, whose fair share alone says who goes next.
        """
        now_due = [
            e
            for e in created
            if e.status is ExecutionStatus.SCHEDULED
            and e.scheduled_at <= now_ms
            and not self.contended
        ]
        # Read in the claim's own transaction: an operator's cap, fence or disable set a
        # moment before the jobs were submitted holds for their first runs too (a copy
        # from the firer's last load could be seconds old).
        apps = MySqlAppStore(conn).app_policies() if now_due else {}
        due = {e.execution_id: e for e in now_due if _sendable(jobs[e.job_id], apps)}
        if not due:
            keys = insert_executions_with_ids(conn, created, now_ms)
            return [], pack_dispatches([], now_ms), _scheduled_keys(created, keys)
        # A FORBID job with a run scheduled or going is left to the firer, which alone
        # decides overlaps: two threads reading each other's uncommitted runs could
        # both send.
        busy = jobs_with_runs(
            conn,
            [
                e.job_id
                for e in due.values()
                if jobs[e.job_id].policy.overlap is OverlapPolicy.FORBID
            ],
            UNFINISHED,
        )
        live = self.view.live()
        rows: list[NewExecution] = []
        for execution in created:
            if execution.execution_id in due and execution.job_id not in busy:
                worker_id = self._router.choose(jobs[execution.job_id].handler, live)
                if worker_id is not None:
                    execution = execution.queued_on(worker_id)
            rows.append(execution)
        execution_keys = insert_executions_with_ids(conn, rows, now_ms)
        sent = [
            _assignment(row, execution_key, jobs[row.job_id])
            for row, execution_key in zip(rows, execution_keys, strict=True)
            if row.status is ExecutionStatus.QUEUED
        ]
        packs = pack_dispatches(sent, now_ms, tracing=self._tracing)
        return sent, packs, _scheduled_keys(rows, execution_keys)

    def hand_over(self, claim: OpenClaim, keep_going: Callable[[], bool]) -> bool:
        """Queue an open claim for the dispatch loop; False (rolled back) once it stops."""
        while keep_going():
            with self._lock:
                if self._closed:
                    break
                try:
                    self._ready.put_nowait(claim)
                    return True
                except queue.Full:
                    pass
            time.sleep(HAND_OVER_POLL_S)
        claim.abandon()
        return False

    def scheduled(self, rows: Sequence[ExecutionWithJob]) -> None:
        """Note the executions a claim committed SCHEDULED, for the firer; called once
        the claim's transaction committed."""
        if rows:
            with self._lock:
                self._scheduled.extend(rows)

    def take_scheduled(self) -> list[ExecutionWithJob]:
        """The executions noted since the last call (dispatch loop)."""
        with self._lock:
            taken, self._scheduled = self._scheduled, []
        return taken

    def send_ready(self, publisher: Publisher) -> int:
        """Send every claim handed over so far (dispatch loop); how many executions landed."""
        landed = 0
        while True:
            try:
                claim = self._ready.get_nowait()
            except queue.Empty:
                return landed
            landed += claim.send(publisher)

    def close(self) -> None:
        """Roll back the claims still waiting, and any handed over from now on (the
        dispatch loop stops leading)."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    self._ready.get_nowait().abandon()
                except queue.Empty:
                    return


def _sendable(job: DueJob, apps: Mapping[int, AppPolicy]) -> bool:
    """Whether a claim may send the job's run: its app has no cap to count against and
    no fence, and the job waits for no other job's runs (the firer applies all three)."""
    if job.has_dependencies:
        return False
    policy = apps.get(job.app_pk, DEFAULT_POLICY)
    return policy.max_running is None and app_fence(job.handler, policy) is None


def _scheduled_keys(rows: Sequence[NewExecution], keys: Sequence[int]) -> list[Written]:
    """The rows written SCHEDULED, with their keys."""
    return [
        Written(row, key)
        for row, key in zip(rows, keys, strict=True)
        if row.status is ExecutionStatus.SCHEDULED
    ]


def _assignment(row: NewExecution, execution_key: int, job: DueJob) -> Assignment:
    assert row.worker_id is not None
    return Assignment(
        execution_key=execution_key,
        execution_id=row.execution_id,
        job_id=row.job_id,
        attempt=row.attempt,
        trigger_time=row.trigger_time,
        handler=job.handler,
        params_json=job.params,
        worker_id=row.worker_id,
        timeout_seconds=job.timeout_seconds,
        traceparent=row.traceparent,
        app_pk=job.app_pk,
    )
