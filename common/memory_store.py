"""Jobs, executions and callback deliveries in memory: the store's twin for unit tests.

``MemoryStore`` keeps the contract of ``common.db.outcome_store.OutcomeStore`` (as
procrastinate's InMemoryConnector keeps its connector's): the same rows come back, the
same unique keys refuse a second row with the same ``IntegrityError`` (MySQL's 1062),
so the logic above it can be tested without a server. ``tests/contracts/outcome_store.py``
runs one test class against it and against MySQL.

It keeps ``DispatchStore`` (``unmark_queued``) and ``FireStore`` (what is due, and the
writes that settle it) too, and ``FireTransactions``: a ``transaction`` that undoes what
it changed when it raises, as a rolled-back one does, and a plain ``reading``. What it
leaves out: locks and isolation (one caller at a time: nothing is ever held by another
transaction, so ``skip_locked`` passes nothing over), the apps table and its keys, and
every column that recording, firing and sending do not touch.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql  # type: ignore[import-untyped]
from sqlalchemy.exc import IntegrityError

from common.db.deliveries import JobLabel, NewDelivery
from common.db.executions import UNFINISHED, LockedExecution, NewExecution
from common.db.jobs import TriggerSettings
from common.db.sendable import ExecutionWithJob
from common.schedule import MisfirePolicy, OverlapPolicy
from common.states import DeliveryStatus, ExecutionStatus, JobStatus

_DUPLICATE_KEY = 1062
_NO_PARENT_ROW = 1452


@dataclass
class MemoryJob:
    """A jobs row, as far as recording and firing read and write it (``id`` given when
    added; the fields after it are those only firing reads)."""

    app_pk: int = 1
    job_name: str = "job"
    status: JobStatus = JobStatus.RUNNING
    recurring: bool = False
    next_trigger_time: int | None = None
    callback_url: str | None = None
    client_request_id: str | None = None
    max_retries: int = 0
    retry_backoff_seconds: int = 10
    retry_backoff_max_seconds: int = 3600
    version: int = 0
    updated_at: int = 0
    id: int = 0
    handler: str = "demo.noop"
    params: str = "{}"
    timeout_seconds: int | None = None
    overlap_policy: str = OverlapPolicy.FORBID
    misfire_policy: str = MisfirePolicy.FIRE_ONCE
    misfire_threshold_seconds: int = 60


@dataclass
class MemoryExecution:
    """An executions row."""

    id: int
    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    scheduled_at: int | None
    status: ExecutionStatus
    manual: bool = False
    worker_id: str | None = None
    message: str | None = None
    result: str | None = None
    created_at: int = 0
    dispatched_at: int | None = None
    started_at: int | None = None
    ended_at: int | None = None

    def locked(self) -> LockedExecution:
        """The row as ``lock_unfinished`` returns it."""
        return LockedExecution(
            self.id,
            self.execution_id,
            self.job_id,
            self.attempt,
            self.trigger_time,
            self.status,
            self.manual,
        )

    def with_job(self, job: MemoryJob) -> ExecutionWithJob:
        """The row as ``scheduled_until`` returns it, read with its job's data."""
        assert self.scheduled_at is not None, "a SCHEDULED execution has its time"
        return ExecutionWithJob(
            self.id,
            self.execution_id,
            self.job_id,
            self.attempt,
            self.trigger_time,
            self.scheduled_at,
            self.worker_id,
            self.status,
            self.manual,
            job.handler,
            job.params,
            job.timeout_seconds,
            job.overlap_policy,
            job.misfire_policy,
            job.misfire_threshold_seconds,
            job.next_trigger_time,
            job.status,
            job.recurring,
            self.dispatched_at,
        )


@dataclass(frozen=True)
class MemoryDelivery:
    """A callback_deliveries row as ``insert_deliveries`` writes it."""

    delivery: NewDelivery
    status: DeliveryStatus
    attempts: int
    created_at: int
    updated_at: int


def refused(code: int, what: str) -> IntegrityError:
    """The error MySQL's driver raises, as SQLAlchemy wraps it, for a refused row."""
    return IntegrityError(f"memory store: {what}", None, pymysql.err.IntegrityError(code, what))


@dataclass
class MemoryStore:
    """The jobs, executions and deliveries tables: ``OutcomeStore``, ``FireStore``,
    ``FireTransactions``, and seeding."""

    jobs: dict[int, MemoryJob] = field(default_factory=dict)
    executions: dict[int, MemoryExecution] = field(default_factory=dict)
    deliveries: list[MemoryDelivery] = field(default_factory=list)
    _next_job_id: int = 1
    _next_execution_key: int = 1

    # Seeding, reading and transactions, for tests.

    @contextlib.contextmanager
    def transaction(self) -> Iterator[MemoryStore]:
        """A transaction as ``engine.begin()`` gives one: whatever it changed is undone
        if it raises. (Not isolated: there is one caller at a time.)"""
        before = copy.deepcopy(self.__dict__)
        try:
            yield self
        except BaseException:
            self.__dict__.update(before)
            raise

    @contextlib.contextmanager
    def reading(self) -> Iterator[MemoryStore]:
        """The store for reads outside a transaction (``engine.connect()``)."""
        yield self

    def add_job(self, job: MemoryJob) -> int:
        """Add ``job`` under a new id; return the id. A client request id an app has
        used already is refused, as the jobs table's unique key refuses it."""
        request = (job.app_pk, job.client_request_id)
        if job.client_request_id is not None and any(
            (j.app_pk, j.client_request_id) == request for j in self.jobs.values()
        ):
            raise refused(_DUPLICATE_KEY, f"Duplicate entry for request {job.client_request_id}")
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

    # OutcomeStore.

    def lock_unfinished(self, refs: Mapping[str, int | None]) -> list[LockedExecution]:
        """Rows by key, then rows whose key was stale by execution id; the unfinished."""
        known = {key for key in refs.values() if key is not None}
        looked_up = {r.id for r in self._by_execution_id(e for e, k in refs.items() if k is None)}
        rows = [self.executions[k] for k in sorted(known | looked_up) if k in self.executions]
        found = {r.execution_id for r in rows}
        stale = [e for e, key in refs.items() if key is not None and e not in found]
        rows += self._by_execution_id(stale)
        return [r.locked() for r in rows if r.status in UNFINISHED]

    def trigger_settings(self, job_ids: Iterable[int]) -> dict[int, TriggerSettings]:
        """What recording needs of each job that exists."""
        return {
            j.id: TriggerSettings(
                j.id,
                j.app_pk,
                j.status,
                j.recurring,
                j.next_trigger_time is not None,
                j.callback_url,
                j.max_retries,
                j.retry_backoff_seconds,
                j.retry_backoff_max_seconds,
            )
            for j in (self.jobs.get(i) for i in sorted(set(job_ids)))
            if j is not None
        }

    def record_outcomes(self, outcomes: Sequence[Mapping[str, Any]]) -> None:
        """Write final states over rows that exist (as ``lock_unfinished`` returned them)."""
        for o in outcomes:
            row = self.executions[int(o["id"])]
            row.status = ExecutionStatus(o["status"])
            row.worker_id = o["worker_id"]
            row.message = o["message"]
            row.result = o["result"]
            row.started_at = o["started_at"]
            row.ended_at = o["ended_at"]

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
            )

    def _check_executions(self, rows: Sequence[NewExecution]) -> None:
        ids = {r.execution_id for r in self.executions.values()}
        slots = {(r.job_id, r.trigger_time, r.attempt, r.manual) for r in self.executions.values()}
        for r in rows:
            slot = (r.job_id, r.trigger_time, r.attempt, r.manual)
            if r.execution_id in ids or slot in slots:
                raise refused(_DUPLICATE_KEY, f"Duplicate entry for execution {r.execution_id}")
            if r.job_id not in self.jobs:
                raise refused(_NO_PARENT_ROW, f"no job {r.job_id} for {r.execution_id}")
            ids.add(r.execution_id)
            slots.add(slot)

    def release_jobs(self, ends: Iterable[tuple[int, JobStatus | None]], now_ms: int) -> None:
        """Move the jobs on as ``common.db.jobs.release_jobs`` does: one-shot jobs to
        their end, recurring ones back to WAITING, a job cancelled meanwhile as it is."""
        groups: dict[JobStatus | None, list[int]] = {}
        for job_id, final in ends:
            groups.setdefault(final, []).append(job_id)
        for final, job_ids in groups.items():
            for job in (self.jobs.get(i) for i in sorted(set(job_ids))):
                if job is not None:
                    _end_trigger(job, final, now_ms)

    def job_labels(self, job_ids: Iterable[int]) -> dict[int, JobLabel]:
        """The name and client request id of each job that exists."""
        found = (self.jobs.get(i) for i in set(job_ids))
        return {j.id: JobLabel(j.job_name, j.client_request_id) for j in found if j is not None}

    # FireStore: what is due, and the writes that settle it.

    def scheduled_until(self, until_ms: int, limit: int) -> list[ExecutionWithJob]:
        """SCHEDULED executions due by ``until_ms``, soonest first (then by key)."""
        due = [
            r
            for r in self.executions.values()
            if r.status is ExecutionStatus.SCHEDULED
            and r.scheduled_at is not None
            and r.scheduled_at <= until_ms
        ]
        due.sort(key=lambda r: (r.scheduled_at, r.id))
        return [r.with_job(self.jobs[r.job_id]) for r in due[:limit]]

    def lock_still_scheduled(self, keys: Iterable[int], skip_locked: bool = False) -> set[int]:
        """The keys of these executions still SCHEDULED (no other transaction holds any)."""
        rows = (self.executions.get(k) for k in set(keys))
        return {r.id for r in rows if r is not None and r.status is ExecutionStatus.SCHEDULED}

    def jobs_with_runs(self, job_ids: Iterable[int]) -> set[int]:
        """Which of these jobs have an execution QUEUED."""
        wanted = set(job_ids)
        queued = ExecutionStatus.QUEUED
        return {r.job_id for r in self.executions.values() if r.status is queued} & wanted

    def lock_free_jobs(self, job_ids: Iterable[int]) -> set[int]:
        """The ids of these jobs that exist (no other transaction holds any)."""
        return set(job_ids) & self.jobs.keys()

    def mark_skipped(
        self,
        reasons: Mapping[int, str],
        now_ms: int,
        status: ExecutionStatus = ExecutionStatus.SKIPPED,
    ) -> None:
        """End these executions with ``status`` and their reasons, whatever they were (the
        caller locked them SCHEDULED)."""
        for key, reason in reasons.items():
            row = self.executions.get(key)
            if row is not None:
                row.status, row.message, row.ended_at = status, reason, now_ms

    def hold_scheduled(self, reasons: Mapping[int, str], until_ms: int) -> None:
        """Move these executions' ``scheduled_at`` to ``until_ms``, with why in their message."""
        for key, reason in reasons.items():
            row = self.executions.get(key)
            if row is not None:
                row.scheduled_at, row.message = until_ms, reason

    # DispatchStore, and what the firer marks before it sends.

    def mark_queued(self, workers: Mapping[int, str], now_ms: int) -> None:
        """Mark these executions (key -> worker id) QUEUED, as ``executions.mark_queued``
        does: only those still SCHEDULED change."""
        for key, worker_id in workers.items():
            row = self.executions.get(key)
            if row is not None and row.status is ExecutionStatus.SCHEDULED:
                row.dispatched_at = now_ms
                row.worker_id = worker_id
                row.message = None
                row.status = ExecutionStatus.QUEUED

    def unmark_queued(self, keys: Iterable[int]) -> None:
        """Put these executions back to SCHEDULED, with no worker and no dispatch time."""
        for row in (self.executions.get(k) for k in sorted(set(keys))):
            if row is not None:
                row.status = ExecutionStatus.SCHEDULED
                row.worker_id = None
                row.dispatched_at = None

    def insert_deliveries(self, rows: Sequence[NewDelivery], now_ms: int) -> None:
        """Record PENDING deliveries: all, or none if a unique key refuses one."""
        ids = {d.delivery.delivery_id for d in self.deliveries}
        executions = {d.delivery.execution_id for d in self.deliveries}
        for r in rows:
            if r.delivery_id in ids or r.execution_id in executions:
                raise refused(_DUPLICATE_KEY, f"Duplicate entry for delivery {r.delivery_id}")
            ids.add(r.delivery_id)
            executions.add(r.execution_id)
        pending = DeliveryStatus.PENDING
        self.deliveries += [MemoryDelivery(r, pending, 0, now_ms, now_ms) for r in rows]


def _end_trigger(job: MemoryJob, final: JobStatus | None, now_ms: int) -> None:
    """One job's part of ``end_triggers``: the row changes (version and time) in any case."""
    if final is not None and job.status in (JobStatus.RUNNING, JobStatus.PAUSED):
        job.status = final
    elif final is None and job.status is JobStatus.RUNNING:
        job.status = JobStatus.WAITING
    job.version += 1
    job.updated_at = now_ms
