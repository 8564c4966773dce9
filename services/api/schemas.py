"""Request and response bodies of the OpenAPI, named as the clients see them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from common.schedule import MisfirePolicy, OverlapPolicy
from common.states import ExecutionStatus, JobStatus
from services.api.fields import (
    NOT_BOOLEAN,
    CallbackUrl,
    ExecutionId,
    Instant,
    Timestamp,
    Uri,
    WholeNumber,
)


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
    callbackUrl: CallbackUrl | None = None
    clientRequestId: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="idempotency key of the job, unique per app and compared exactly "
        "(`Report-1` is not `report-1`); the Idempotency-Key header is the same key",
    )
    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=64,
        description="IANA zone for cronExpr and triggerAt",
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
    status: JobStatus


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

    executionId: ExecutionId
    jobId: int
    attempt: int
    manual: bool = Field(description="made by POST .../trigger, besides the schedule")
    triggerTime: Timestamp | None
    workerId: str | None
    status: ExecutionStatus
    scheduledAt: Timestamp | None = None
    dispatchedAt: Timestamp | None = None
    startedAt: Timestamp | None
    endedAt: Timestamp | None
    message: str | None
    result: Any = Field(default=None, description="the handler's return value, as JSON")


class JobPoliciesView(BaseModel):
    """A job's scheduling policies."""

    timezone: str
    fixedRateSeconds: int | None
    misfirePolicy: MisfirePolicy
    misfireThresholdSeconds: int
    catchUpWindowSeconds: int
    overlapPolicy: OverlapPolicy
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
    status: JobStatus
    nextTriggerTime: Timestamp | None
    nextTriggerTimes: list[Timestamp] | None = Field(
        default=None, description="the next trigger times, with ?preview=N"
    )
    policies: JobPoliciesView
    callbackUrl: Uri | None
    clientRequestId: str | None
    createdAt: Timestamp | None
    updatedAt: Timestamp | None
    lastExecution: ExecutionView | None


class ExecutionList(BaseModel):
    """One page of a job's executions, newest first."""

    jobId: int
    executions: list[ExecutionView]
    nextCursor: str | None = Field(
        default=None, description="pass as ?cursor= for the next page; null on the last page"
    )


class FieldError(BaseModel):
    """One input a problem names: the field (``jobs[3].cronExpr`` in a batch) and what
    is wrong with it."""

    field: str = Field(description="the request field, query parameter or header at fault")
    message: str
    jobId: int | SkipJsonSchema[None] = Field(
        default=None, description="the job an idempotency key already names (batch items)"
    )


class Problem(BaseModel):
    """An RFC 9457 problem detail: ``type`` is a stable URI to switch on (README,
    "Problem types"), ``instance`` names the request (its ``Request-Id``)."""

    model_config = ConfigDict(extra="allow")

    type: Uri = Field(description="stable problem type, `urn:kairos:problem:<name>`")
    title: str
    status: int = Field(ge=100, le=599)
    detail: str = Field(description="what went wrong and what to do about it")
    instance: Uri = Field(description="`urn:kairos:request:<Request-Id>`")
    errors: list[FieldError] | SkipJsonSchema[None] = Field(
        default=None, description="each input at fault (422)"
    )
    jobId: int | SkipJsonSchema[None] = Field(
        default=None, description="the job concerned (404, 409, 403, 422 idempotency-conflict)"
    )
    jobStatus: JobStatus | SkipJsonSchema[None] = Field(
        default=None, description="the job's status that refused the action (409)"
    )
    executionId: ExecutionId | SkipJsonSchema[None] = Field(
        default=None, description="the execution concerned (404)"
    )


NotNull = SkipJsonSchema[None]

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

    # A field that may not be null: null is refused with a message, and left out of the
    # document (the constraints sit on the value's own type, not on the union).
    jobName: Annotated[str, Field(min_length=1, max_length=200)] | SkipJsonSchema[None] = None
    params: dict[str, Any] | SkipJsonSchema[None] = None
    cronExpr: str | None = Field(
        default=None,
        max_length=200,
        description="a new schedule for a cron job (a one-shot job cannot become recurring)",
    )
    timezone: Annotated[str, Field(min_length=1, max_length=64)] | SkipJsonSchema[None] = None
    fixedRateSeconds: WholeNumber | None = Field(default=None, ge=1, le=366 * 86_400)
    misfirePolicy: MisfirePolicy | SkipJsonSchema[None] = None
    misfireThresholdSeconds: Annotated[int, Field(ge=0, le=86_400 * 31), NOT_BOOLEAN] | NotNull = (
        None
    )
    catchUpWindowSeconds: Annotated[int, Field(ge=0, le=86_400 * 31), NOT_BOOLEAN] | NotNull = None
    overlapPolicy: OverlapPolicy | SkipJsonSchema[None] = None
    maxRetries: Annotated[int, Field(ge=0, le=100), NOT_BOOLEAN] | NotNull = None
    retryBackoffSeconds: Annotated[int, Field(ge=0, le=86_400), NOT_BOOLEAN] | NotNull = None
    retryBackoffMaxSeconds: Annotated[int, Field(ge=0, le=7 * 86_400), NOT_BOOLEAN] | NotNull = None
    timeoutSeconds: WholeNumber | None = Field(default=None, ge=1, le=7 * 86_400)
    callbackUrl: CallbackUrl | None = None

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
    executionId: ExecutionId
    status: ExecutionStatus
