"""The rows of the in-memory store: jobs, executions and callback deliveries, as far as
recording, firing and sending read and write them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pymysql  # type: ignore[import-untyped]
from sqlalchemy.exc import IntegrityError

from common.db.deliveries import DeliveryRecord, NewDelivery
from common.db.executions import LockedExecution
from common.db.executions_with_job import SLOT_WAIT, ExecutionWithJob
from common.db.job_dependencies import After
from common.schedule import MisfirePolicy, OverlapPolicy
from common.states import DeadReason, DeliveryStatus, ExecutionStatus, JobStatus

DUPLICATE_KEY = 1062
NO_PARENT_ROW = 1452


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
    priority: int = 5
    # Its parents (``job_dependencies``), whether it was deleted, when it was made.
    after: tuple[After, ...] = ()
    deleted: bool = False
    created_at: int = 0


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
    params: str | None = None
    traceparent: str | None = None
    backfill: bool = False
    waited_for: str | None = None

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
            self.params,
            self.traceparent,
            self.backfill,
        )

    def with_job(self, job: MemoryJob, has_children: bool = False) -> ExecutionWithJob:
        """The row as ``scheduled_until`` returns it, read with its job's data
        (``has_children``: some job waits for this one's runs)."""
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
            job.params if self.params is None else self.params,
            job.timeout_seconds,
            job.overlap_policy,
            job.misfire_policy,
            job.misfire_threshold_seconds,
            job.next_trigger_time,
            job.status,
            job.recurring,
            self.dispatched_at,
            job.app_pk,
            job.priority,
            self.message == SLOT_WAIT,
            self.traceparent,
            bool(job.after),
            job.created_at,
            has_children,
        )


@dataclass(frozen=True)
class MemoryDelivery:
    """A callback_deliveries row as ``insert_deliveries`` writes it; what its attempts
    leave (``DeliveryStore.record_attempts``) after that, kept out of comparisons so
    that rows read back from MySQL compare by what they were recorded with."""

    delivery: NewDelivery
    status: DeliveryStatus
    attempts: int
    created_at: int
    updated_at: int
    pk: int = field(default=0, compare=False)
    last_status_code: int | None = field(default=None, compare=False)
    last_error: str | None = field(default=None, compare=False)
    delivered_at: int | None = field(default=None, compare=False)
    next_attempt_at: int | None = field(default=None, compare=False)
    dead_reason: DeadReason | None = field(default=None, compare=False)

    def record(self) -> DeliveryRecord:
        """The row as the store reads it."""
        d = self.delivery
        return DeliveryRecord(
            self.pk,
            d.delivery_id,
            d.execution_id,
            d.job_id,
            d.app_pk,
            d.url,
            d.payload,
            self.status,
            self.attempts,
            self.last_status_code,
            self.last_error,
            self.created_at,
            self.updated_at,
            self.delivered_at,
            self.next_attempt_at,
            self.dead_reason,
            d.traceparent,
            d.alert_rule_pk,
        )


def refused(code: int, what: str) -> IntegrityError:
    """The error MySQL's driver raises, as SQLAlchemy wraps it, for a refused row."""
    return IntegrityError(f"memory store: {what}", None, pymysql.err.IntegrityError(code, what))
