"""What the API answers, as frozen dataclasses with snake_case fields.

Dataclasses rather than pydantic models: the client depends on httpx alone, so it
installs beside any pydantic version (1 or 2) an application already pins. Each model
keeps the JSON it was read from in ``raw``, so a member a newer server adds is there to
read before this client knows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kairos_client._reading import Reader
from kairos_client.enums import (
    DependOn,
    ExecutionStatus,
    JobStatus,
    MisfirePolicy,
    OverlapPolicy,
)
from kairos_client.specs import After


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class WaitedFor:
    """A parent job's run that a child's run waited for."""

    job_id: int
    execution_id: str
    status: ExecutionStatus | str

    @classmethod
    def from_json(cls, body: Any, what: str) -> WaitedFor:
        """Read a ``WaitedForRun``."""
        r = Reader(body, what)
        return cls(
            job_id=r.integer("jobId"),
            execution_id=r.text("executionId"),
            status=r.choice("status", ExecutionStatus),
        )


def _waited_for(r: Reader, what: str) -> list[WaitedFor] | None:
    """``waitedFor`` (None when absent: a server older than dependencies, or none)."""
    if r.body.get("waitedFor") is None:
        return None
    return [WaitedFor.from_json(item, f"{what}.waitedFor") for item in r.items("waitedFor")]


def _after(r: Reader, what: str) -> list[After]:
    """``after`` ([] when absent: a server older than dependencies)."""
    if r.body.get("after") is None:
        return []
    parents = []
    for item in r.items("after"):
        parent = Reader(item, f"{what}.after")
        parents.append(After(parent.integer("jobId"), parent.choice("on", DependOn)))
    return parents


@dataclass(frozen=True)
class Execution:
    """One attempt at one trigger of a job."""

    execution_id: str
    job_id: int
    attempt: int
    manual: bool
    status: ExecutionStatus | str
    trigger_time: datetime | None
    worker_id: str | None
    scheduled_at: datetime | None
    dispatched_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    message: str | None
    result: Any
    # The params a trigger with params gave this run; None: it ran with the job's.
    params: dict[str, Any] | None = None
    # Made by a backfill of a past trigger time (``manual`` is true too).
    backfill: bool = False
    # The parents' runs this run waited for (its job has ``after``), else None.
    waited_for: list[WaitedFor] | None = None
    raw: Mapping[str, Any] = _raw()
    # The W3C traceparent the run carried to its handler and callback; None: untraced
    # (or a server older than traces).
    traceparent: str | None = None

    @classmethod
    def from_json(cls, body: Any, what: str = "execution") -> Execution:
        """Read an ``ExecutionView``."""
        r = Reader(body, what)
        return cls(
            execution_id=r.text("executionId"),
            job_id=r.integer("jobId"),
            attempt=r.integer("attempt"),
            manual=r.flag("manual"),
            status=r.choice("status", ExecutionStatus),
            trigger_time=r.time_or_none("triggerTime"),
            worker_id=r.text_or_none("workerId"),
            scheduled_at=r.time_or_none("scheduledAt"),
            dispatched_at=r.time_or_none("dispatchedAt"),
            started_at=r.time_or_none("startedAt"),
            ended_at=r.time_or_none("endedAt"),
            message=r.text_or_none("message"),
            result=r.body.get("result"),
            params=r.mapping("params") if r.body.get("params") is not None else None,
            backfill=r.flag("backfill"),
            waited_for=_waited_for(r, what),
            raw=r.body,
            traceparent=r.text_or_none("traceparent"),
        )


@dataclass(frozen=True)
class JobPolicies:
    """A job's scheduling policies."""

    timezone: str
    fixed_rate_seconds: int | None
    misfire_policy: MisfirePolicy | str
    misfire_threshold_seconds: int
    catch_up_window_seconds: int
    overlap_policy: OverlapPolicy | str
    max_retries: int
    retry_backoff_seconds: int
    retry_backoff_max_seconds: int
    timeout_seconds: int | None
    # Each scheduled trigger fires up to this many seconds late (0: on time).
    jitter_seconds: int = 0

    @classmethod
    def from_reader(cls, r: Reader) -> JobPolicies:
        """Read a ``JobPoliciesView``."""
        return cls(
            timezone=r.text("timezone"),
            fixed_rate_seconds=r.integer_or_none("fixedRateSeconds"),
            misfire_policy=r.choice("misfirePolicy", MisfirePolicy),
            misfire_threshold_seconds=r.integer("misfireThresholdSeconds"),
            catch_up_window_seconds=r.integer("catchUpWindowSeconds"),
            overlap_policy=r.choice("overlapPolicy", OverlapPolicy),
            max_retries=r.integer("maxRetries"),
            retry_backoff_seconds=r.integer("retryBackoffSeconds"),
            retry_backoff_max_seconds=r.integer("retryBackoffMaxSeconds"),
            timeout_seconds=r.integer_or_none("timeoutSeconds"),
            jitter_seconds=r.integer_or_none("jitterSeconds") or 0,
        )


DEFAULT_PRIORITY = 5
"""The priority of a job whose request names none. A server older than priorities
sends no priority (it runs every job alike): such a job reads as this."""


def _priority(r: Reader) -> int:
    value = r.integer_or_none("priority")
    return DEFAULT_PRIORITY if value is None else value


@dataclass(frozen=True)
class Job:
    """A job as stored, with its last execution. ``priority`` (0-9) orders the app's
    own waiting runs, higher first."""

    job_id: int
    job_name: str
    job_handler: str
    params: dict[str, Any]
    cron_expr: str | None
    status: JobStatus | str
    next_trigger_time: datetime | None
    next_trigger_times: list[datetime] | None
    policies: JobPolicies | None
    priority: int
    callback_url: str | None
    client_request_id: str | None
    created_at: datetime | None
    updated_at: datetime | None
    last_execution: Execution | None
    # With ``preview``: when each of ``next_trigger_times`` fires, its jitter added.
    next_fire_times: list[datetime] | None = None
    # The jobs whose runs this job's runs wait for.
    after: list[After] = field(default_factory=list)
    raw: Mapping[str, Any] = _raw()
    # The valid W3C traceparent the job was created with; None: none.
    traceparent: str | None = None

    @classmethod
    def from_json(cls, body: Any, what: str = "job") -> Job:
        """Read a ``JobView``."""
        r = Reader(body, what)
        policies = r.child("policies")
        last = r.body.get("lastExecution")
        return cls(
            job_id=r.integer("jobId"),
            job_name=r.text("jobName"),
            job_handler=r.text("jobHandler"),
            params=r.mapping("params"),
            cron_expr=r.text_or_none("cronExpr"),
            status=r.choice("status", JobStatus),
            next_trigger_time=r.time_or_none("nextTriggerTime"),
            next_trigger_times=r.times_or_none("nextTriggerTimes"),
            policies=JobPolicies.from_reader(policies) if policies else None,
            priority=_priority(r),
            callback_url=r.text_or_none("callbackUrl"),
            client_request_id=r.text_or_none("clientRequestId"),
            created_at=r.time_or_none("createdAt"),
            updated_at=r.time_or_none("updatedAt"),
            last_execution=None if last is None else Execution.from_json(last, f"{what}.last"),
            next_fire_times=r.times_or_none("nextFireTimes"),
            after=_after(r, what),
            raw=r.body,
            traceparent=r.text_or_none("traceparent"),
        )


@dataclass(frozen=True)
class JobAccepted:
    """The answer to a create: the job's id and status. ``replayed``: the server
    answered a repeat of an earlier request with the same key (nothing new was made)."""

    job_id: int
    status: JobStatus | str
    replayed: bool = False

    @classmethod
    def from_json(cls, body: Any, replayed: bool, what: str = "accepted") -> JobAccepted:
        """Read a ``JobAccepted``."""
        r = Reader(body, what)
        return cls(r.integer("jobId"), r.choice("status", JobStatus), replayed)


@dataclass(frozen=True)
class BatchAccepted:
    """The answer to a batch create: one ``JobAccepted`` per job, in request order."""

    jobs: list[JobAccepted]
    replayed: bool = False

    @classmethod
    def from_json(cls, body: Any, replayed: bool) -> BatchAccepted:
        """Read a ``JobBatchAccepted``."""
        items = Reader(body, "batch").items("jobs")
        jobs = [JobAccepted.from_json(j, False, f"batch.jobs[{n}]") for n, j in enumerate(items)]
        return cls(jobs, replayed)


@dataclass(frozen=True)
class TriggerAccepted:
    """The answer to a manual trigger: the execution that will run."""

    job_id: int
    execution_id: str
    status: ExecutionStatus | str
    replayed: bool = False

    @classmethod
    def from_json(cls, body: Any, replayed: bool) -> TriggerAccepted:
        """Read a ``TriggerAccepted``."""
        r = Reader(body, "trigger")
        return cls(
            r.integer("jobId"), r.text("executionId"), r.choice("status", ExecutionStatus), replayed
        )


@dataclass(frozen=True)
class BackfillAccepted:
    """The answer to a backfill: the range covered (``to_time`` cut at now), runs
    created for its times that had none, times that had an execution already, and
    times left to the job's schedule (at or after its next trigger time)."""

    job_id: int
    from_time: datetime
    to_time: datetime
    created: int
    existing: int
    left_to_schedule: int

    @classmethod
    def from_json(cls, body: Any) -> BackfillAccepted:
        """Read a ``BackfillAccepted``."""
        r = Reader(body, "backfill")
        return cls(
            r.integer("jobId"),
            r.time("from"),
            r.time("to"),
            r.integer("created"),
            r.integer("existing"),
            r.integer("leftToSchedule"),
        )
