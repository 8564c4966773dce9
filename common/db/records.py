"""A stored job and a stored execution as typed records, the shape the API, the console
and ``kairos jobs`` read them in.

Each is built from a row of ``sa.select(jobs)`` or ``sa.select(executions)`` in one
place (``from_row``), so every column a reader uses has a checked type, and the status
and policy columns are the enums the code compares them with.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.db.rows import AnyRow
from common.schedule import MisfirePolicy, OverlapPolicy, Schedule
from common.states import ExecutionStatus, JobStatus

MOST_RETRIES = 100
"""The most retries a job may ask for (``maxRetries``), and an app's bound by default."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A ``jobs`` row: what a job is, when it fires next and what it last became."""

    id: int
    app_pk: int
    job_name: str
    handler: str
    params: str
    cron_expr: str | None
    next_trigger_time: int | None
    status: JobStatus
    owner_worker: str | None
    version: int
    callback_url: str | None
    client_request_id: str | None
    request_hash: str | None
    claim_token: str | None
    created_at: int
    updated_at: int
    timezone: str
    fixed_rate_seconds: int | None
    misfire_policy: MisfirePolicy
    misfire_threshold_seconds: int
    catch_up_window_seconds: int
    overlap_policy: OverlapPolicy
    max_retries: int
    retry_backoff_seconds: int
    retry_backoff_max_seconds: int
    timeout_seconds: int | None
    deleted_at: int | None
    priority: int
    jitter_seconds: int = 0
    # The W3C traceparent the job was submitted with (``common.tracing``), or None.
    traceparent: str | None = None
    # It has parents in job_dependencies (migration 0019).
    has_dependencies: bool = False

    @classmethod
    def from_row(cls, row: AnyRow) -> JobRecord:
        """The record of a row holding every column of ``jobs``."""
        return cls(
            id=int(row.id),
            app_pk=int(row.app_pk),
            job_name=str(row.job_name),
            handler=str(row.handler),
            params=str(row.params),
            cron_expr=row.cron_expr,
            next_trigger_time=row.next_trigger_time,
            status=JobStatus(row.status),
            owner_worker=row.owner_worker,
            version=int(row.version),
            callback_url=row.callback_url,
            client_request_id=row.client_request_id,
            request_hash=row.request_hash,
            claim_token=row.claim_token,
            created_at=int(row.created_at),
            updated_at=int(row.updated_at),
            timezone=str(row.timezone),
            fixed_rate_seconds=row.fixed_rate_seconds,
            misfire_policy=MisfirePolicy(row.misfire_policy),
            misfire_threshold_seconds=int(row.misfire_threshold_seconds),
            catch_up_window_seconds=int(row.catch_up_window_seconds),
            overlap_policy=OverlapPolicy(row.overlap_policy),
            max_retries=int(row.max_retries),
            retry_backoff_seconds=int(row.retry_backoff_seconds),
            retry_backoff_max_seconds=int(row.retry_backoff_max_seconds),
            timeout_seconds=row.timeout_seconds,
            deleted_at=row.deleted_at,
            priority=int(row.priority),
            jitter_seconds=int(row.jitter_seconds),
            traceparent=row.traceparent,
            has_dependencies=bool(row.has_dependencies),
        )

    @property
    def schedule(self) -> Schedule:
        """How the job repeats: its cron expression in its zone, its rate, or not at all."""
        return Schedule(self.cron_expr, self.timezone, self.fixed_rate_seconds)


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """An ``executions`` row: one attempt at one trigger, and how far it got."""

    id: int
    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    worker_id: str | None
    status: ExecutionStatus
    message: str | None
    result: str | None
    created_at: int
    dispatched_at: int | None
    started_at: int | None
    ended_at: int | None
    scheduled_at: int | None
    manual: bool
    # JSON text of the params a trigger with params gave the run; None: the job's.
    params: str | None = None
    # The W3C traceparent the run carries to its handler and callback, or None.
    traceparent: str | None = None
    backfill: bool = False
    # JSON array of the parent runs it waited for (migration 0019), or None.
    waited_for: str | None = None

    @classmethod
    def from_row(cls, row: AnyRow) -> ExecutionRecord:
        """The record of a row holding every column of ``executions``."""
        return cls(
            id=int(row.id),
            execution_id=str(row.execution_id),
            job_id=int(row.job_id),
            attempt=int(row.attempt),
            trigger_time=int(row.trigger_time),
            worker_id=row.worker_id,
            status=ExecutionStatus(row.status),
            message=row.message,
            result=row.result,
            created_at=int(row.created_at),
            dispatched_at=row.dispatched_at,
            started_at=row.started_at,
            ended_at=row.ended_at,
            scheduled_at=row.scheduled_at,
            manual=bool(row.manual),
            params=row.params,
            traceparent=row.traceparent,
            backfill=bool(row.backfill),
            waited_for=row.waited_for,
        )


@dataclass(frozen=True, slots=True)
class AppLimits:
    """What an operator lets one app consume (``kairos app limits``): its ``weight`` in
    the share of slots (1 by default), the most runs it may have going at once, the
    most jobs it may keep stored, the shortest interval a schedule of its may have and
    the bytes of run log its runs may store per hour (None: no such limit), and the
    most retries a job of its may ask for (``max_retries``, 100 by default, the most a
    job may ask for). The dispatcher reads weight and max_running, and gives a failed
    run no more retries than ``max_retries``; the API refuses what the job quotas
    forbid; workers drop run-log lines past the run-log quota."""

    weight: int = 1
    max_running: int | None = None
    max_jobs: int | None = None
    min_cron_interval_seconds: int | None = None
    run_log_bytes_per_hour: int | None = None
    max_retries: int = MOST_RETRIES

    @classmethod
    def from_row(cls, row: AnyRow) -> AppLimits:
        """The limits a row holding the ``apps`` columns of the same names carries."""
        return cls(
            weight=int(row.weight),
            max_running=_whole_or_none(row.max_running),
            max_jobs=_whole_or_none(row.max_jobs),
            min_cron_interval_seconds=_whole_or_none(row.min_cron_interval_seconds),
            run_log_bytes_per_hour=_whole_or_none(row.run_log_bytes_per_hour),
            max_retries=int(row.max_retries),
        )


def _whole_or_none(value: object) -> int | None:
    return None if value is None else int(str(value))


NO_LIMITS = AppLimits()
"""An app's limits as they stand until an operator sets some: weight 1, no cap, no quota."""
