"""The store as recording outcomes sees it: ten operations, one transaction.

``OutcomeStore`` is the port ``services.dispatcher.outcomes.recording`` writes through;
``MySqlOutcomeStore`` passes each call to the repository function of the same name on
the caller's connection (no query of its own), the deliveries' to the deliveries
aggregate (``MySqlDeliveryStore``), and ``common.memory.store.MemoryStore``
keeps the same contract in memory for unit tests (``tests/contracts/outcome_store.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from common.db import deliveries, executions, jobs
from common.db.deliveries import JobLabel, NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.dependency_store import DependencyStore, MySqlDependencyStore
from common.db.executions import LockedExecution, NewExecution, Outcome
from common.db.jobs import TriggerSettings
from common.states import DeliveryStatus, JobStatus


class OutcomeStore(DependencyStore, Protocol):
    """What recording a batch of outcomes reads and writes, inside one transaction."""

    def lock_unfinished(self, refs: Mapping[str, int | None]) -> list[LockedExecution]:
        """Lock the executions of ``refs`` (execution id -> key or None); the unfinished."""
        ...

    def trigger_settings(self, job_ids: Iterable[int]) -> dict[int, TriggerSettings]:
        """What recording needs of each job: app, schedule, retries, callback URL."""
        ...

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> None:
        """Write the final states of locked executions."""
        ...

    def insert_executions(self, rows: Sequence[NewExecution], now_ms: int) -> None:
        """Create executions (retries); a second one of a trigger and attempt is refused."""
        ...

    def release_jobs(self, ends: Iterable[tuple[int, JobStatus | None]], now_ms: int) -> None:
        """Move the jobs of ended triggers on (job id, final status or None: recurring)."""
        ...

    def job_labels(self, job_ids: Iterable[int]) -> dict[int, JobLabel]:
        """The name and client request id of each job, for its callback."""
        ...

    def jobs_with_callbacks_on_their_way(self, job_ids: Iterable[int]) -> set[int]:
        """Those of these jobs with a callback delivery PENDING, QUEUED or RETRYING."""
        ...

    def insert_deliveries(
        self,
        rows: Sequence[NewDelivery],
        now_ms: int,
        status: DeliveryStatus = DeliveryStatus.PENDING,
    ) -> None:
        """Record callback deliveries, PENDING or (published after the commit) QUEUED."""
        ...


class MySqlOutcomeStore(MySqlDeliveryStore, MySqlDependencyStore):
    """``OutcomeStore`` on a MySQL connection whose transaction the caller holds; the
    deliveries it records are the deliveries aggregate's (``MySqlDeliveryStore``)."""

    __slots__ = ()

    def lock_unfinished(self, refs: Mapping[str, int | None]) -> list[LockedExecution]:
        """See ``executions.lock_unfinished``."""
        return executions.lock_unfinished(self._conn, refs)

    def trigger_settings(self, job_ids: Iterable[int]) -> dict[int, TriggerSettings]:
        """See ``jobs.trigger_settings``."""
        return jobs.trigger_settings(self._conn, job_ids)

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> None:
        """See ``executions.record_outcomes``."""
        executions.record_outcomes(self._conn, outcomes)

    def insert_executions(self, rows: Sequence[NewExecution], now_ms: int) -> None:
        """See ``executions.insert_executions``."""
        executions.insert_executions(self._conn, rows, now_ms)

    def release_jobs(self, ends: Iterable[tuple[int, JobStatus | None]], now_ms: int) -> None:
        """See ``jobs.release_jobs``."""
        jobs.release_jobs(self._conn, ends, now_ms)

    def job_labels(self, job_ids: Iterable[int]) -> dict[int, JobLabel]:
        """See ``deliveries.job_labels``."""
        return deliveries.job_labels(self._conn, job_ids)
