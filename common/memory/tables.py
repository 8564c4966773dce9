"""The tables of the in-memory store, with its transactions and the seeding every part
of it shares: what the stores of recording, firing and rescue build on."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Self

from common.clock import wall_ms
from common.db.audit import AuditEntry
from common.db.deliveries import AttemptRecord
from common.db.executions import UNFINISHED, NewExecution
from common.db.workers import WorkerRecord
from common.memory.app_rows import MemoryApiKey, MemoryApp
from common.memory.rows import (
    DUPLICATE_KEY,
    NO_PARENT_ROW,
    MemoryDelivery,
    MemoryExecution,
    MemoryJob,
    refused,
)
from common.states import ExecutionStatus


@dataclass
class MemoryTables:
    """The jobs, executions, deliveries, workers, apps and API keys tables and the audit
    rows, a transaction over them all, and seeding."""

    jobs: dict[int, MemoryJob] = field(default_factory=dict)
    executions: dict[int, MemoryExecution] = field(default_factory=dict)
    deliveries: list[MemoryDelivery] = field(default_factory=list)
    callback_attempts: list[AttemptRecord] = field(default_factory=list)
    workers: dict[str, WorkerRecord] = field(default_factory=dict)
    # An app not here has the defaults as the dispatcher reads them.
    apps: dict[int, MemoryApp] = field(default_factory=dict)
    api_keys: list[MemoryApiKey] = field(default_factory=list)
    # The audit rows written, with when.
    audit: list[tuple[int, AuditEntry]] = field(default_factory=list)
    # The store's own clock, which API keys end by (MySQL's ``NOW(3)``).
    clock: Callable[[], int] = wall_ms
    _next_app_pk: int = 1
    _next_job_id: int = 1
    _next_execution_key: int = 1
    _next_delivery_pk: int = 0

    # Seeding, reading and transactions, for tests.

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
        """A transaction as ``engine.begin()`` gives one: whatever it changed is undone
        if it raises. (Not isolated: there is one caller at a time.)"""
        before = copy.deepcopy(self.__dict__)
        try:
            yield self
        except BaseException:
            self.__dict__.update(before)
            raise

    @contextlib.contextmanager
    def reading(self) -> Iterator[Self]:
        """The store for reads outside a transaction (``engine.connect()``)."""
        yield self

    def add_job(self, job: MemoryJob) -> int:
        """Add ``job`` under a new id; return the id. A client request id an app has
        used already is refused, as the jobs table's unique key refuses it."""
        request = (job.app_pk, job.client_request_id)
        if job.client_request_id is not None and any(
            (j.app_pk, j.client_request_id) == request for j in self.jobs.values()
        ):
            raise refused(DUPLICATE_KEY, f"Duplicate entry for request {job.client_request_id}")
        job.id = self._next_job_id
        self._next_job_id += 1
        self.jobs[job.id] = job
        return job.id

    def execution(self, execution_id: str) -> MemoryExecution:
        """The row of ``execution_id`` (KeyError if none)."""
        found = self._by_execution_id([execution_id])
        if not found:
            raise KeyError(execution_id)
        return found[0]

    def executions_of(self, job_id: int) -> list[MemoryExecution]:
        """A job's executions, by trigger time and attempt."""
        rows = [r for r in self.executions.values() if r.job_id == job_id]
        return sorted(rows, key=lambda r: (r.trigger_time, r.attempt, r.id))

    def _by_execution_id(self, execution_ids: Iterable[str]) -> list[MemoryExecution]:
        wanted = set(execution_ids)
        return [r for k, r in sorted(self.executions.items()) if r.execution_id in wanted]

    def insert_executions(self, rows: Sequence[NewExecution], now_ms: int) -> None:
        """Insert all of ``rows`` or, if a unique or foreign key refuses one, none."""
        self._check_executions(rows)
        for r in rows:
            key = self._next_execution_key
            self._next_execution_key += 1
            self.executions[key] = MemoryExecution(
                key,
                r.execution_id,
                r.job_id,
                r.attempt,
                r.trigger_time,
                r.scheduled_at,
                r.status,
                r.manual,
                r.worker_id,
                r.message,
                created_at=now_ms,
                dispatched_at=now_ms if r.status is ExecutionStatus.QUEUED else None,
                ended_at=None if r.status in UNFINISHED else now_ms,
                params=r.params,
                traceparent=r.traceparent,
                backfill=r.backfill,
            )

    def _check_executions(self, rows: Sequence[NewExecution]) -> None:
        ids = {r.execution_id for r in self.executions.values()}
        slots = {(r.job_id, r.trigger_time, r.attempt, r.manual) for r in self.executions.values()}
        for r in rows:
            slot = (r.job_id, r.trigger_time, r.attempt, r.manual)
            if r.execution_id in ids or slot in slots:
                raise refused(DUPLICATE_KEY, f"Duplicate entry for execution {r.execution_id}")
            if r.job_id not in self.jobs:
                raise refused(NO_PARENT_ROW, f"no job {r.job_id} for {r.execution_id}")
            ids.add(r.execution_id)
            slots.add(slot)
