"""Recovery sweeps run by the leader: unpublished executions, dead workers, callbacks."""

from __future__ import annotations

import logging
from typing import Any, Literal

import redis
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.db import deliveries, executions, workers
from common.db.deliveries import NewDelivery
from common.db.retention import prune_deliveries, prune_executions
from common.keys import RedisKeys
from common.loadbalance import WorkerChooser
from common.messages import ExecutionResult
from common.result_messages import results_message, stand_in_results
from common.started_mark import parse_started
from common.timefmt import iso_ms
from services.dispatcher.callbacks import publish_deliveries
from services.dispatcher.directory import WorkerDirectory
from services.dispatcher.publishing import Assignment, send_queued

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500
# Forgetting a worker takes a commit and a queue deletion (~5 ms here): a backlog of
# gone workers is forgotten over several sweeps rather than stalling the dispatch loop
# in one (bench/sweep.py).
FORGET_PER_SWEEP = 20
PRUNE_BATCH = 1_000
STAND_IN_SENDER = "dispatcher"


class Recovery:
    """Puts stranded work back on its way; every step is safe to repeat."""

    def __init__(
        self,
        engine: Engine,
        publisher: BatchPublisher,
        directory: WorkerDirectory,
        chooser: WorkerChooser,
        stores: tuple[redis.Redis, RedisKeys, ClusterClock],
        pending_after_ms: int,
        stale_ms: int,
        timeout_grace_ms: int,
        retention_ms: int = 0,
        forget_ms: int = 0,
    ) -> None:
        self._engine = engine
        self._publisher = publisher
        self._directory = directory
        self._chooser = chooser
        self._redis, self._keys, self._clock = stores
        self._pending_after_ms = pending_after_ms
        self._stale_ms = stale_ms
        self._timeout_grace_ms = timeout_grace_ms
        self._retention_ms = retention_ms
        self._forget_ms = forget_ms

    def sweep(self) -> None:
        """Run every recovery step once."""
        self.rescue_dead_workers()
        self.time_out_overdue()
        self.republish_deliveries()
        self.prune()

    def prune(self) -> None:
        """Delete one batch of history past the retention period, if one is set."""
        if self._retention_ms <= 0:
            return
        cutoff = self._clock.now_ms() - self._retention_ms
        with self._engine.begin() as conn:
            gone = prune_executions(conn, cutoff, PRUNE_BATCH)
            gone += prune_deliveries(conn, cutoff, PRUNE_BATCH)
        if gone:
            log.info("retention: deleted %d finished rows", gone)

    def time_out_overdue(self) -> None:
        """Record TIMED_OUT for runs past their job's timeout whose worker never reported."""
        now = self._clock.now_ms()
        with self._engine.connect() as conn:
            rows = executions.overdue(conn, now, self._timeout_grace_ms, SWEEP_LIMIT)
        if rows:
            log.warning("%d executions passed their timeout without a report", len(rows))
            self._report(rows, "TIMED_OUT", "no result within the job's timeout")

    def rescue_dead_workers(self) -> None:
        """Move work off workers that stopped or went silent and have no consumer on their
        queue; forget those gone longer than ``forget_ms`` once nothing is left on them."""
        now = self._clock.now_ms()
        with self._engine.connect() as conn:
            stale = workers.gone_workers(conn, now - self._stale_ms)
        forgettable = FORGET_PER_SWEEP if self._forget_ms > 0 else 0
        for worker in stale:
            if self._directory.consumer_count(worker.worker_id) != 0:
                continue
            # A worker that still had work this sweep is tried again on a later one,
            # once what was moved or reported has left it.
            had_work = self._rescue(worker.worker_id)
            long_gone = worker.last_heartbeat < now - self._forget_ms
            if forgettable and long_gone and not had_work:
                forgettable -= self._forget(worker.worker_id, int(worker.last_heartbeat), now)

    def _forget(self, worker_id: str, last_heard_ms: int, now_ms: int) -> bool:
        """Stop sweeping a worker long gone, and delete its queue; whether it did.

        Each gone worker costs every sweep (once a second) a broker round trip and a
        query; with ids that change on every restart they would pile up for good. What
        its queue still holds are copies of executions already moved or ended. The mark
        commits only once the queue is gone, so a failed delete is tried again; the
        mark's row lock makes a heartbeat of the worker coming back wait, then win.
        """
        with self._engine.connect() as conn, conn.begin() as transaction:
            if not workers.forget_worker(conn, worker_id, now_ms - self._forget_ms):
                return False
            if not self._directory.delete_queue(worker_id):
                transaction.rollback()
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
        with self._engine.connect() as conn:
            rows = executions.unfinished_on_worker(conn, worker_id, SWEEP_LIMIT)
        if not rows:
            return False
        marks = {r.execution_id: self._started_mark(r.execution_id) for r in rows}
        started = [r for r in rows if marks[r.execution_id][0] == worker_id]
        ended = [r for r in started if marks[r.execution_id][1] is not None]
        lost = [r for r in started if r not in ended]
        unstarted = [r for r in rows if r not in started]
        log.warning(
            "worker %s is dead: %d executions lost, %d ended unreported, %d moved",
            worker_id,
            len(lost),
            len(ended),
            len(unstarted),
            extra={"worker_id": worker_id},
        )
        self._publish_results(
            [ExecutionResult.model_validate_json(str(marks[r.execution_id][1])) for r in ended]
        )
        self._report(lost, "LOST", f"worker {worker_id} died while running it")
        self._reroute(unstarted)
        return True

    def _started_mark(self, execution_id: str) -> tuple[str | None, str | None]:
        return parse_started(self._redis.get(self._keys.execution_started(execution_id)))

    def _report(self, rows: list[Any], status: Literal["LOST", "TIMED_OUT"], why: str) -> None:
        """Publish results on the workers' behalf, through the normal results path."""
        self._publish_results(stand_in_results(rows, status, why, self._clock.now_ms()))

    def _publish_results(self, results: list[ExecutionResult]) -> None:
        """Publish results on the workers' behalf, through the normal results path."""
        if results:
            self._publisher.publish([results_message(STAND_IN_SENDER, results)])

    def _reroute(self, rows: list[Any]) -> None:
        live = self._directory.live()
        moved: list[Assignment] = []
        now = self._clock.now_ms()
        with self._engine.begin() as conn:
            for row in rows:
                worker = self._chooser.choose(live, row.handler)
                # A row that ended since it was read stays as it is.
                if worker is not None and executions.reassign(
                    conn, row.execution_id, row.worker_id, worker.worker_id, now
                ):
                    moved.append(Assignment.of(row, worker.worker_id))
            # The rows stay QUEUED, now pointing at their new worker; publishing inside
            # the transaction means a failed publish leaves them on the dead one, and
            # what the broker could not route goes SCHEDULED, for the firer.
            if moved:
                returned = send_queued(conn, self._publisher, moved, now)
                if returned:
                    log.warning(
                        "%d moved executions found no queue; firing them again", len(returned)
                    )

    def republish_deliveries(self) -> None:
        """Hand the notifier again callbacks recorded but never confirmed in its queue."""
        cutoff = self._clock.now_ms() - self._pending_after_ms
        with self._engine.connect() as conn:
            rows = deliveries.stale_pending(conn, cutoff, SWEEP_LIMIT)
        if rows:
            log.warning("republishing %d callback deliveries", len(rows))
            publish_deliveries(
                self._engine,
                self._publisher,
                self._clock,
                [
                    NewDelivery(r.delivery_id, r.execution_id, r.job_id, r.app_id, r.url, r.payload)
                    for r in rows
                ],
            )
