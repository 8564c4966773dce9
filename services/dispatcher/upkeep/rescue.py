"""Rescuing dead workers' work: report what ended or was running, move what never started.

A worker is dead when its heartbeat is stale (or it said it stopped) AND its queue has
no consumer. Its executions a run ended on are reported with their stored results; the
one it was running is recorded LOST (retried if the job allows); the ones it never
started move to a live worker. Workers long gone, with nothing left on them, are
forgotten: their queue is deleted and the sweep stops looking at them.

The rescue reads and writes through ports: ``WorkerStore`` (the workers aggregate) and
``RescueStore`` (what is QUEUED on a worker; both MySQL, or ``MemoryStore`` in unit
tests), ``WorkerQueues`` (the worker directory on RabbitMQ, or ``MemoryWorkers``) and
``StartedMarks`` (Redis, or ``MemoryStartedMarks``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.broker import Publisher
from common.clock import Clock
from common.db.executions_with_job import SLOT_WAIT, ExecutionWithJob
from common.db.rescue_store import MySqlRescueTransactions, RescueStore, RescueTransactions
from common.db.workers import WorkerRecord, WorkerTransactions
from common.loadbalance import WorkerQueues, runs
from common.messages import ExecutionResult
from common.result_messages import publish_results, stand_in_results, stored_result
from common.started_marks import RECALLED, RunState, StartedMarks, key_may_be_lost
from common.states import ExecutionStatus
from common.store_errors import is_store_outage
from common.stores import Stores
from common.timefmt import iso_ms
from services.dispatcher.routing.dispatch import Assignment, pack_dispatches, send_packs
from services.dispatcher.routing.route import Router
from services.dispatcher.routing.workers import WorkerDirectory
from services.dispatcher.trigger.fire_rules import no_worker_reason
from services.dispatcher.upkeep.rescue_plan import plan_rescue

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500
# Forgetting a worker takes a commit and a queue deletion: a backlog of
# gone workers is forgotten over several sweeps rather than stalling the dispatch loop
# in one (bench/sweep.py).
FORGET_PER_SWEEP = 20
STAND_IN_SENDER = "dispatcher"


@dataclass(frozen=True)
class RescueSettings:
    """When a worker counts as dead, and when as gone for good (0: never forgotten)."""

    stale_ms: int
    forget_ms: int = 0


class _QueueInUse(Exception):
    """A forgotten worker's queue could not be deleted: the forget is rolled back."""


class Rescue:
    """Puts dead workers' executions back on their way; every step is safe to repeat."""

    def __init__(
        self,
        transactions: RescueTransactions,
        workers: WorkerTransactions,
        marks: StartedMarks,
        clock: Clock,
        publisher: Publisher,
        router: Router[WorkerQueues],
        settings: RescueSettings,
        on_dead: Callable[[WorkerRecord], None] | None = None,
    ) -> None:
        self._transactions = transactions
        # Told of each dead worker at each sweep that finds it (the leader's alerts).
        self._on_dead = on_dead
        self._workers = workers
        self._marks = marks
        self._clock = clock
        self._publisher = publisher
        self._directory = router.directory
        self._router = router
        self._stale_ms = settings.stale_ms
        self._forget_ms = settings.forget_ms

    @classmethod
    def on_stores(
        cls,
        stores: Stores,
        publisher: Publisher,
        router: Router[WorkerDirectory],
        settings: RescueSettings,
        on_dead: Callable[[WorkerRecord], None] | None = None,
    ) -> Rescue:
        """The dispatcher's rescue: on MySQL, Redis's started marks and the cluster clock.
        Unit tests build one on ``MemoryStore``, ``MemoryStartedMarks`` and a clock of
        their own instead."""
        transactions = MySqlRescueTransactions(stores.engine)
        marks = stores.started_marks()
        return cls(
            transactions,
            stores.workers(),
            marks,
            stores.clock,
            publisher,
            router,
            settings,
            on_dead,
        )

    def rescue_dead_workers(self) -> None:
        """Move work off workers that stopped or went silent and have no consumer on their
        queue; forget those gone longer than ``forget_ms`` once nothing is left on them."""
        now = self._clock.now_ms()
        with self._workers.reading() as workers:
            stale = workers.gone_workers(now - self._stale_ms)
        forgettable = FORGET_PER_SWEEP if self._forget_ms > 0 else 0
        for worker in stale:
            if self._directory.consumer_count(worker.worker_id) != 0:
                continue
            self._tell_dead(worker)
            # A worker that still had work this sweep is tried again on a later one,
            # once what was moved or reported has left it.
            try:
                had_work = self._rescue(worker.worker_id)
            except Exception as e:
                if is_store_outage(e):
                    raise
                log.exception("rescuing worker %s failed; the others go on", worker.worker_id)
                continue
            long_gone = worker.last_heartbeat < now - self._forget_ms
            if forgettable and long_gone and not had_work:
                forgettable -= self._forget(worker.worker_id, worker.last_heartbeat, now)

    def _tell_dead(self, worker: WorkerRecord) -> None:
        """Tell ``on_dead`` of a dead worker; its failing costs the rescue nothing."""
        if self._on_dead is None:
            return
        try:
            self._on_dead(worker)
        except Exception as e:
            if is_store_outage(e):
                raise
            log.exception("alerting on dead worker %s failed", worker.worker_id)

    def move_off_draining_workers(self) -> None:
        """Move the unstarted work of DRAINING workers that stopped consuming (an
        operator's drain, or a SIGTERM) to live workers; their runs are left to finish.

        Only executions with no started key move, and not those dispatched before Redis
        last lost its data (one of those may be running with its key gone). The copy
        left in the drained worker's queue finds the key of the run that took it, should
        the worker consume again, and is dropped.
        """
        now = self._clock.now_ms()
        with self._workers.reading() as workers:
            draining = workers.draining_workers(now - self._stale_ms)
        for worker in draining:
            if self._directory.consumer_count(worker.worker_id) != 0:
                continue
            with self._transactions.reading() as store:
                rows = store.unfinished_on_worker(worker.worker_id, SWEEP_LIMIT)
            if not rows:
                continue
            epoch = self._marks.epoch(now)
            marks = self._marks.read_runs([r.execution_id for r in rows])
            unstarted = [
                r
                for r, mark in zip(rows, marks, strict=True)
                if mark.state is RunState.NEVER_STARTED
                and not key_may_be_lost(r.dispatched_at, epoch)
            ]
            moved, held = self._reroute(worker.worker_id, unstarted)
            if moved or held:
                log.info(
                    "worker %s drains: %d unstarted executions moved, %d back to the firer",
                    worker.worker_id,
                    moved,
                    held,
                    extra={"worker_id": worker.worker_id},
                )

    def _forget(self, worker_id: str, last_heard_ms: int, now_ms: int) -> bool:
        """Stop sweeping a worker long gone, and delete its queue; whether it did.

        Each gone worker costs every sweep (once a second) a broker round trip and a
        query; with ids that change on every restart they would pile up for good. What
        its queue still holds are copies of executions already moved or ended. The mark
        commits only once the queue is gone, so a failed delete is tried again; the
        mark's row lock makes a heartbeat of the worker coming back wait, then win.
        """
        try:
            with self._workers.transaction() as workers:
                # A paused ex-leader stopped inside its own forget holds the row: pass
                # over it rather than wait (a later sweep forgets the worker).
                if not workers.forget_worker_unless_held(worker_id, now_ms - self._forget_ms):
                    return False
                if not self._directory.delete_queue(worker_id):
                    raise _QueueInUse(worker_id)  # leaving the transaction rolls it back
        except _QueueInUse:
            log.info("worker %s has a consumer on its queue again", worker_id)
            return False
        log.info(
            "forgot worker %s, last heard at %s; deleted its queue",
            worker_id,
            iso_ms(last_heard_ms),
            extra={"worker_id": worker_id},
        )
        return True

    def _rescue(self, worker_id: str) -> bool:
        """Report or move the worker's unfinished executions; whether it had any."""
        with self._transactions.reading() as store:
            rows = store.unfinished_on_worker(worker_id, SWEEP_LIMIT)
        if not rows:
            return False
        read = self._marks.read_runs([r.execution_id for r in rows])
        marks = {r.execution_id: mark for r, mark in zip(rows, read, strict=True)}
        now = self._clock.now_ms()
        plan = plan_rescue(worker_id, rows, marks, self._marks.epoch(now))
        self._report([stored_result(outcome, r, now) for r, outcome in plan.ended])
        why = f"worker {worker_id} died while running it"
        self._report(stand_in_results(plan.lost, ExecutionStatus.LOST, why, now))
        why = (
            f"worker {worker_id} died, and Redis lost the mark that says whether it had "
            "started this run: it is not run again"
        )
        self._report(stand_in_results(plan.unknown, ExecutionStatus.LOST, why, now))
        lost = len(plan.lost) + len(plan.unknown)
        moved, held = self._reroute(worker_id, plan.unstarted)
        log.warning(
            "worker %s is dead: %d executions lost, %d ended unreported, %d moved, "
            "%d back to the firer (no live worker with room runs their handler)",
            worker_id,
            lost,
            len(plan.ended),
            moved,
            held,
            extra={"worker_id": worker_id},
        )
        return True

    def _report(self, results: Sequence[ExecutionResult]) -> None:
        publish_results(self._publisher, STAND_IN_SENDER, results)

    def _reroute(self, from_worker: str, rows: Sequence[ExecutionWithJob]) -> tuple[int, int]:
        """Move never-started executions off ``from_worker`` to live workers; how many
        moved, and how many went back to the firer because no live worker that runs
        their handler has room for them (there they wait for a free slot, shared fairly).

        Those must leave the dead worker: left QUEUED there, they would be read first
        at every sweep, and the rest of its work behind them would never move. The
        firer holds them, saying why, until a worker runs their handler.
        """
        live = self._directory.live()
        moved: list[Assignment] = []
        held = 0
        now = self._clock.now_ms()
        with self._transactions.transaction() as store:
            free = self._lock_free(store, from_worker, rows)
            for row, assignment in self._router.route(free, live):
                # A row that ended since it was read stays as it is.
                if assignment is None:
                    reason = SLOT_WAIT if runs(live, row.handler) else no_worker_reason(row.handler)
                    held += store.unassign(row.execution_id, from_worker, reason, now)
                elif store.reassign(row.execution_id, from_worker, assignment.worker_id, now):
                    moved.append(assignment)
            # The rows stay QUEUED, now pointing at their new worker; publishing inside
            # the transaction means a failed publish leaves them on the dead one, and
            # what the broker could not route goes SCHEDULED, for the firer.
            if moved:
                # A run fenced by a recall whose leader went mid-way goes again: the dead
                # or drained worker consumes none of its copies.
                self._marks.release_runs([a.execution_id for a in moved], RECALLED)
                returned = send_packs(store, self._publisher, pack_dispatches(moved, now))
                if returned:
                    log.warning(
                        "%d moved executions found no queue; firing them again", len(returned)
                    )
        return len(moved), held

    def _lock_free(
        self, store: RescueStore, from_worker: str, rows: Sequence[ExecutionWithJob]
    ) -> list[ExecutionWithJob]:
        """Lock the rows still QUEUED on ``from_worker`` that no other transaction holds;
        return those. Rows another transaction holds (a paused ex-leader's) move on a
        later pass: waiting for them could keep this sweep past the leader's stall limit.
        """
        free = store.lock_queued_on([r.execution_id for r in rows], from_worker)
        if len(free) < len(rows):
            log.info(
                "%d executions to move are held by another transaction; a later pass moves them",
                len(rows) - len(free),
            )
        return [r for r in rows if r.execution_id in free]
