"""Request and response bodies of the OpenAPI, named as the clients see them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from common.schedule import MisfirePolicy, OverlapPolicy
from services.api.fields import Instant, WholeNumber


class JobCreate(BaseModel):
    """A job to schedule: one-shot at ``triggerAt`` (now when absent) or cron."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "jobName": "nightly report",
                    "jobHandler": "demo.echo",
                    "params": {"day": "2026-11-30"},
                    "cronExpr": "0 2 * * *",
                    "callbackUrl": "https://example.com/hooks/kairos",
                    "clientRequestId": "report-2026-11-30",
                }
            ]
        },
    )

    jobName: str = Field(min_length=1, max_length=200)
    jobHandler: str = Field(min_length=1, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict)
    cronExpr: str | None = Field(
        default=None,
        max_length=200,
        description="5 fields (min hour dom mon dow) or 6 with seconds first, read in `timezone`",
    )
    triggerAt: Instant = Field(
        default=None,
        description="ISO 8601 (without an offset: a wall time in `timezone`) or epoch ms, "
        "1970 through 9999; absent means now",
    )
    callbackUrl: str | None = Field(default=None, max_length=2048)
    clientRequestId: str | None = Field(default=None, min_length=1, max_length=128)
    timezone: str = Field(
        default="UTC", max_length=64, description="IANA zone for cronExpr and triggerAt"
    )
    fixedRateSeconds: WholeNumber | None = Field(
        default=None, ge=1, le=366 * 86_400, description="repeat every N seconds (not with cron)"
    )
    misfirePolicy: MisfirePolicy = Field(
        default=MisfirePolicy.FIRE_ONCE,
        description="a trigger found later than misfireThresholdSeconds: FIRE_ONCE runs "
        "once now, SKIP jumps to the next future time, FIRE_ALL runs each missed trigger "
        "within catchUpWindowSeconds",
    )
    misfireThresholdSeconds: WholeNumber = Field(default=60, ge=0, le=86_400 * 31)
    catchUpWindowSeconds: WholeNumber = Field(default=3600, ge=0, le=86_400 * 31)
    overlapPolicy: OverlapPolicy = Field(
        default=OverlapPolicy.FORBID,
        description="a recurring trigger while the last run still goes: ALLOW runs it too, "
        "FORBID records it SKIPPED, QUEUE runs it when the last run ends",
    )
    maxRetries: WholeNumber = Field(default=0, ge=0, le=100)
    retryBackoffSeconds: WholeNumber = Field(default=10, ge=0, le=86_400)
    retryBackoffMaxSeconds: WholeNumber = Field(default=3600, ge=0, le=7 * 86_400)
    timeoutSeconds: WholeNumber | None = Field(default=None, ge=1, le=7 * 86_400)


class JobAccepted(BaseModel):
    """The answer to a create: the job id and its status."""

    jobId: int
    status: str


MAX_BATCH_JOBS = 1_000


class JobBatchCreate(BaseModel):
    """Up to 1,000 jobs to create all or nothing, each as in a single create."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "jobs": [
                        {"jobName": "a", "jobHandler": "demo.echo", "clientRequestId": "a-1"},
                        {"jobName": "b", "jobHandler": "demo.echo", "cronExpr": "0 2 * * *"},
                    ]
                }
            ]
        },
    )

    jobs: list[JobCreate] = Field(
        min_length=1,
        max_length=MAX_BATCH_JOBS,
        description=f"1 to {MAX_BATCH_JOBS:,} jobs; each may carry its own clientRequestId",
    )


class JobBatchAccepted(BaseModel):
    """The answer to a batch create: one job id and status per item, in request order."""

    jobs: list[JobAccepted]


class ExecutionView(BaseModel):
    """One attempt at one trigger."""

    executionId: str
    attempt: int
    triggerTime: str | None
    workerId: str | None
    status: str
    scheduledAt: str | None = None
    dispatchedAt: str | None = None
    startedAt: str | None
    endedAt: str | None
    message: str | None
    result: Any = None


class JobPoliciesView(BaseModel):
    """A job's scheduling policies."""

    timezone: str
    fixedRateSeconds: int | None
    misfirePolicy: str
    misfireThresholdSeconds: int
    catchUpWindowSeconds: int
    overlapPolicy: str
    maxRetries: int
    retryBackoffSeconds: int
    retryBackoffMaxSeconds: int
    timeoutSeconds: int | None


class JobView(BaseModel):
    """A job as stored, with its last execution."""

    jobId: int
    jobName: str
    jobHandler: str
    params: dict[str, Any]
    cronExpr: str | None
    status: str
    nextTriggerTime: str | None
    nextTriggerTimes: list[str] | None = Field(
        default=None, description="the next trigger times, with ?preview=N"
    )
    policies: JobPoliciesView
    callbackUrl: str | None
    clientRequestId: str | None
    createdAt: str | None
    updatedAt: str | None
    lastExecution: ExecutionView | None


class ExecutionList(BaseModel):
    """A job's executions, newest first."""

    jobId: int
    executions: list[ExecutionView]


class Problem(BaseModel):
    """An RFC 9457 problem detail."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None


_NOT_NULL = (
    "jobName",
    "params",
    "timezone",
    "misfirePolicy",
    "misfireThresholdSeconds",
    "catchUpWindowSeconds",
    "overlapPolicy",
    "maxRetries",
    "retryBackoffSeconds",
    "retryBackoffMaxSeconds",
)


class JobPatch(BaseModel):
    """Fields of a job to change, with the limits of ``JobCreate``.

    A field left out keeps its stored value; null clears cronExpr, fixedRateSeconds,
    timeoutSeconds or callbackUrl and is refused for the other fields.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"cronExpr": "30 2 * * *", "maxRetries": 3}]},
    )

    jobName: str | None = Field(default=None, min_length=1, max_length=200)
    params: dict[str, Any] | None = None
    cronExpr: str | None = Field(
        default=None,
        max_length=200,
        description="a new schedule for a cron job (a one-shot job cannot become recurring)",
    )
    timezone: str | None = Field(default=None, max_length=64)
    fixedRateSeconds: WholeNumber | None = Field(default=None, ge=1, le=366 * 86_400)
    misfirePolicy: MisfirePolicy | None = None
    misfireThresholdSeconds: WholeNumber | None = Field(default=None, ge=0, le=86_400 * 31)
    catchUpWindowSeconds: WholeNumber | None = Field(default=None, ge=0, le=86_400 * 31)
    overlapPolicy: OverlapPolicy | None = None
    maxRetries: WholeNumber | None = Field(default=None, ge=0, le=100)
    retryBackoffSeconds: WholeNumber | None = Field(default=None, ge=0, le=86_400)
    retryBackoffMaxSeconds: WholeNumber | None = Field(default=None, ge=0, le=7 * 86_400)
    timeoutSeconds: WholeNumber | None = Field(default=None, ge=1, le=7 * 86_400)
    callbackUrl: str | None = Field(default=None, max_length=2048)

    @field_validator(*_NOT_NULL)
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("may not be null; leave the field out to keep its value")
        return value


class JobList(BaseModel):
    """One page of an app's jobs, newest first."""

    jobs: list[JobView]
    nextCursor: str | None = Field(
        description="pass as ?cursor= for the next page; null on the last page"
    )


class TriggerAccepted(BaseModel):
    """The answer to a manual trigger: the execution that will run."""

    jobId: int
    executionId: str
    status: str
