"""Due-job dispatch: scan, claim by version CAS, create executions, publish."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import DueJob, claim_jobs, find_due_jobs, next_due_time
from common.loadbalance import WorkerChooser
from services.dispatcher.directory import WorkerDirectory
from services.dispatcher.publishing import Assignment, publish_assignments

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TickOutcome:
    """What one pass found: how many it dispatched, and how long to sleep after it."""

    dispatched: int
    full_batch: bool
    sleep_ms: int


class DueJobDispatcher:
    """Claims due jobs and sends each trigger to the least-loaded live worker."""

    def __init__(
        self,
        engine: Engine,
        publisher: BatchPublisher,
        directory: WorkerDirectory,
        chooser: WorkerChooser,
        clock: ClusterClock,
        batch_size: int,
        max_sleep_ms: int,
    ) -> None:
        self._engine = engine
        self._publisher = publisher
        self._directory = directory
        self._chooser = chooser
        self._clock = clock
        self._batch_size = batch_size
        self._max_sleep_ms = max_sleep_ms

    def tick(self) -> TickOutcome:
        """Dispatch one batch of due jobs and say when the next one is due."""
        handlers = self._directory.handlers()
        now = self._clock.now_ms()
        assignments, scanned = self._claim(now, handlers)
        publish_assignments(self._engine, self._publisher, self._clock, assignments)
        if assignments:
            log.info("dispatched %d executions", len(assignments))
        full = scanned >= self._batch_size
        return TickOutcome(len(assignments), full, 0 if full else self._sleep_ms(handlers))

    def _claim(self, now: int, handlers: set[str]) -> tuple[list[Assignment], int]:
        with self._engine.begin() as conn:
            due = find_due_jobs(conn, now, handlers, self._batch_size)
            owners = self._choose(due)
            won = claim_jobs(conn, [j for j in due if j.id in owners], owners, now)
            assignments = [self._assignment(j, owners[j.id]) for j in due if j.id in won]
            insert_executions(
                conn,
                [
                    NewExecution(a.execution_id, a.job_id, a.attempt, a.trigger_time, a.worker_id)
                    for a in assignments
                ],
                now,
            )
        return assignments, len(due)

    def _choose(self, due: list[DueJob]) -> dict[int, str]:
        live = self._directory.live()
        owners: dict[int, str] = {}
        for job in due:
            worker = self._chooser.choose(live, job.handler)
            if worker is not None:
                owners[job.id] = worker.worker_id
        return owners

    @staticmethod
    def _assignment(job: DueJob, worker_id: str) -> Assignment:
        return Assignment(
            execution_id=str(uuid.uuid4()),
            job_id=job.id,
            attempt=1,
            trigger_time=job.trigger_time,
            handler=job.handler,
            params_json=job.params,
            worker_id=worker_id,
        )

    def _sleep_ms(self, handlers: set[str]) -> int:
        with self._engine.connect() as conn:
            next_due = next_due_time(conn, handlers)
        if next_due is None:
            return self._max_sleep_ms
        return max(0, min(self._max_sleep_ms, next_due - self._clock.now_ms()))
