"""Request and response bodies of the OpenAPI, named as the clients see them."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from common.db.job_dependencies import MAX_PARENTS
from common.db.jobs import DEFAULT_PRIORITY
from common.db.records import MOST_RETRIES
from common.dependencies import DependOn
from common.documents import JsonObject, JsonValue
from common.schedule import MisfirePolicy, OverlapPolicy
from common.states import ExecutionStatus, JobStatus
from services.api.fields import (
    CallbackUrl,
    DeliveryId,
    ExecutionId,
    GivenInstant,
    Instant,
    Priority,
    ShownPriority,
    Timestamp,
    Uri,
    WholeNumber,
    standard_bounds,
)

MAX_JITTER_SECONDS = 86_400
JITTER = (
    "cron and fixed-rate jobs: fire each scheduled trigger up to this many seconds late, "
    "by an offset fixed by the job and the trigger time (the same on every look), so jobs "
    "on one schedule do not all start at once; less than the schedule's shortest interval; "
    "0 (the default): on time. Manual triggers and retries are not jittered"
)


def _create_schema(schema: JsonObject) -> None:
    """JobCreate's document: an example, and bounds in JSON Schema's words."""
    schema["examples"] = [
        {
            "jobName": "nightly report",
            "jobHandler": "demo.echo",
            "params": {"day": "2026-11-30"},
            "cronExpr": "0 2 * * *",
            "callbackUrl": "https://example.com/hooks/kairos",
            "clientRequestId": "report-2026-11-30",
        }
    ]
    standard_bounds(schema)


class AfterJob(BaseModel):
    """A parent job: each run of the new job waits until the parent's matching run
    ended as ``on`` says (README, "Job dependencies")."""

    model_config = ConfigDict(extra="forbid")

    jobId: int = Field(ge=1, le=2**63 - 1, description="a job of the same app, not deleted")
    on: DependOn = Field(
        default=DependOn.SUCCEEDED,
        description="SUCCEEDED: the parent's run succeeded; FINISHED: it ran and ended "
        "(SUCCEEDED, FAILED, TIMED_OUT or LOST). A parent run that ended otherwise, or a "
        "parent deleted, settles the waiting run SKIPPED with the reason",
    )


class JobCreate(BaseModel):
    """A job to schedule: one-shot at ``triggerAt`` (now when absent) or cron."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_create_schema)

    jobName: str = Field(min_length=1, max_length=200)
    jobHandler: str = Field(min_length=1, max_length=200)
    params: JsonObject = Field(default_factory=dict)
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
    maxRetries: WholeNumber = Field(
        default=0,
        ge=0,
        le=MOST_RETRIES,
        description="retries of a failed run, at most the app's maxRetries limit "
        "(`kairos app limits APP_ID --max-retries N`, 100 by default)",
    )
    retryBackoffSeconds: WholeNumber = Field(default=10, ge=0, le=86_400)
    retryBackoffMaxSeconds: WholeNumber = Field(default=3600, ge=0, le=7 * 86_400)
    timeoutSeconds: WholeNumber | None = Field(default=None, ge=1, le=7 * 86_400)
    priority: Priority = DEFAULT_PRIORITY
    jitterSeconds: WholeNumber = Field(default=0, ge=0, le=MAX_JITTER_SECONDS, description=JITTER)
    after: list[AfterJob] = Field(
        default_factory=list,
        max_length=MAX_PARENTS,
        description=f"up to {MAX_PARENTS} jobs of this app whose runs this job's runs wait "
        "for: a one-shot parent's latest run; a recurring parent's run at the same trigger "
        "time (recurring child) or its first run from the child's creation (one-shot child)",
    )


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


class WaitedForRun(BaseModel):
    """A parent's run that a child's run waited for (job dependencies)."""

    jobId: int
    executionId: ExecutionId
    status: ExecutionStatus = Field(description="as it was when the child's run was settled")


class ExecutionView(BaseModel):
    """One attempt at one trigger."""

    executionId: ExecutionId
    jobId: int
    attempt: int
    manual: bool = Field(
        description="made by hand (POST .../trigger or .../backfill), besides the schedule"
    )
    backfill: bool = Field(
        default=False,
        description="made by POST .../backfill for a past trigger time (manual is true too)",
    )
    triggerTime: Timestamp | None
    workerId: str | None
    status: ExecutionStatus
    scheduledAt: Timestamp | None = None
    dispatchedAt: Timestamp | None = None
    startedAt: Timestamp | None
    endedAt: Timestamp | None
    message: str | None
    result: JsonValue = Field(default=None, description="the handler's return value, as JSON")
    params: JsonObject | None = Field(
        default=None,
        description="the params a trigger with params gave this run (its handler got these "
        "instead of the job's); null: the run got the job's params as they were when it "
        "was sent",
    )
    traceparent: str | None = Field(
        default=None,
        description="the W3C traceparent this run carries to its handler (`ctx.trace`) and "
        "its callback; null: not traced",
    )
    waitedFor: list[WaitedForRun] | None = Field(
        default=None,
        description="the parents' runs this run waited for (its job has `after`); null "
        "when it waited for none",
    )


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
    jitterSeconds: int = Field(default=0, description=JITTER)


class JobView(BaseModel):
    """A job as stored, with its last execution."""

    jobId: int
    jobName: str
    jobHandler: str
    params: JsonObject
    cronExpr: str | None
    status: JobStatus
    nextTriggerTime: Timestamp | None
    nextTriggerTimes: list[Timestamp] | None = Field(
        default=None, description="the next trigger times, with ?preview=N"
    )
    nextFireTimes: list[Timestamp] | None = Field(
        default=None,
        description="with ?preview=N: when each of nextTriggerTimes fires, its jitter "
        "(jitterSeconds) added; the same times for a job without jitter",
    )
    policies: JobPoliciesView
    priority: ShownPriority
    callbackUrl: Uri | None
    clientRequestId: str | None
    createdAt: Timestamp | None
    updatedAt: Timestamp | None
    lastExecution: ExecutionView | None
    traceparent: str | None = Field(
        default=None,
        description="the valid W3C traceparent header the job was created with; null: none",
    )
    after: list[AfterJob] = Field(
        default_factory=list, description="the jobs whose runs this job's runs wait for"
    )


class ExecutionList(BaseModel):
    """One page of a job's executions, newest first."""

    jobId: int
    executions: list[ExecutionView]
    nextCursor: str | None = Field(
        default=None, description="pass as ?cursor= for the next page; null on the last page"
    )


class CallbackState(StrEnum):
    """Where a callback delivery stands: PENDING (not tried yet), RETRYING (failed, its
    next attempt at ``nextAttemptAt``), DELIVERED (2xx) or DEAD (given up)."""

    PENDING = "PENDING"
    RETRYING = "RETRYING"
    DELIVERED = "DELIVERED"
    DEAD = "DEAD"


class CallbackAttemptView(BaseModel):
    """One POST of a callback."""

    attempt: int = Field(description="1 for the first POST of a schedule")
    at: Timestamp
    statusCode: int | None = Field(description="the receiver's answer; null when none came")
    error: str | None = Field(
        description="the start of a non-2xx answer's body, or what went wrong"
    )
    durationMs: int


class CallbackDeliveryView(BaseModel):
    """The callback of one execution: its state, every attempt, the next one's time."""

    deliveryId: DeliveryId
    executionId: ExecutionId
    state: CallbackState
    deadReason: str | None = Field(
        description="when DEAD: `exhausted` (every attempt failed), `gone` (the receiver "
        "answered 410) or `refused` (the callback URL policy refused it at send time)"
    )
    createdAt: Timestamp
    deliveredAt: Timestamp | None
    nextAttemptAt: Timestamp | None = Field(description="when RETRYING: the next attempt")
    attempts: list[CallbackAttemptView] = Field(description="oldest first")


class CallbackList(BaseModel):
    """One page of a job's callback deliveries, newest first."""

    jobId: int
    deliveries: list[CallbackDeliveryView]
    nextCursor: str | None = Field(
        default=None, description="pass as ?cursor= for the next page; null on the last page"
    )


class CallbackReplayAccepted(BaseModel):
    """A replay accepted: the delivery starts a fresh schedule within seconds."""

    deliveryId: DeliveryId
    state: CallbackState


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
    deliveryId: DeliveryId | SkipJsonSchema[None] = Field(
        default=None, description="the callback delivery concerned (404, 409)"
    )
    deliveryState: CallbackState | SkipJsonSchema[None] = Field(
        default=None, description="the delivery's state that refused a replay (409)"
    )


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
    "priority",
    "jitterSeconds",
    "after",
)


def _patch_schema(schema: JsonObject) -> None:
    """JobPatch's document: the fields that refuse null are shown without a null."""
    schema["examples"] = [{"cronExpr": "30 2 * * *", "maxRetries": 3}]
    for name in _NOT_NULL:
        field = schema["properties"][name]
        branches = [b for b in field.pop("anyOf", []) if b != {"type": "null"}]
        if len(branches) == 1:
            field.update(branches[0])
        elif branches:
            field["anyOf"] = branches
        field.pop("default", None)
    standard_bounds(schema)


class JobPatch(BaseModel):
    """Fields of a job to change, with the limits of ``JobCreate``.

    A field left out keeps its stored value; null clears cronExpr, fixedRateSeconds,
    timeoutSeconds or callbackUrl and is refused for the other fields.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_patch_schema)

    jobName: str | None = Field(default=None, min_length=1, max_length=200)
    params: JsonObject | None = None
    cronExpr: str | None = Field(
        default=None,
        max_length=200,
        description="a new schedule for a cron job (a one-shot job cannot become recurring)",
    )
    timezone: str | None = Field(default=None, min_length=1, max_length=64)
    fixedRateSeconds: WholeNumber | None = Field(default=None, ge=1, le=366 * 86_400)
    misfirePolicy: MisfirePolicy | None = None
    misfireThresholdSeconds: WholeNumber | None = Field(default=None, ge=0, le=86_400 * 31)
    catchUpWindowSeconds: WholeNumber | None = Field(default=None, ge=0, le=86_400 * 31)
    overlapPolicy: OverlapPolicy | None = None
    maxRetries: WholeNumber | None = Field(default=None, ge=0, le=MOST_RETRIES)
    retryBackoffSeconds: WholeNumber | None = Field(default=None, ge=0, le=86_400)
    retryBackoffMaxSeconds: WholeNumber | None = Field(default=None, ge=0, le=7 * 86_400)
    timeoutSeconds: WholeNumber | None = Field(default=None, ge=1, le=7 * 86_400)
    callbackUrl: CallbackUrl | None = None
    priority: Priority | None = None
    jitterSeconds: WholeNumber | None = Field(
        default=None, ge=0, le=MAX_JITTER_SECONDS, description=JITTER
    )
    after: list[AfterJob] | None = Field(
        default=None,
        max_length=MAX_PARENTS,
        description="the job's parents, replacing those stored ([] removes them); a "
        "cycle is refused. Runs already held go by the new parents at their next look",
    )

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


class TriggerRequest(BaseModel):
    """The optional body of a manual trigger."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"params": {"day": "2026-11-30"}}]}
    )

    params: JsonObject | None = Field(
        default=None,
        description="params for this run only, in place of the job's (the job keeps its "
        "own); held to the limits of a job's params. Absent or null: the job's params",
    )


class TriggerAccepted(BaseModel):
    """The answer to a manual trigger: the execution that will run."""

    jobId: int
    executionId: ExecutionId
    status: ExecutionStatus


_BACKFILL_TIME = (
    "ISO 8601 (without an offset: a wall time in the job's timezone) or epoch ms, 1970 through 9999"
)


class BackfillRequest(BaseModel):
    """A range of past trigger times to run: ``from`` included, ``to`` not."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"from": "2026-11-30T00:00:00Z", "to": "2026-12-01T00:00:00Z"}]
        },
    )

    from_: GivenInstant = Field(alias="from", description=f"first time included; {_BACKFILL_TIME}")
    to: GivenInstant = Field(
        description=f"end of the range, not included; {_BACKFILL_TIME}; a time after now "
        "counts as now"
    )


class BackfillAccepted(BaseModel):
    """What a backfill did: runs created for the range's times that had none, and the
    times it left alone."""

    jobId: int
    from_: Timestamp = Field(alias="from", description="first time included")
    to: Timestamp = Field(description="end of the range, not included (now, when later)")
    created: int = Field(description="backfill runs created, SCHEDULED to run now")
    existing: int = Field(description="times in range that had an execution already")
    leftToSchedule: int = Field(
        description="times in range at or after the job's next trigger time: its schedule "
        "runs them (under its misfire policy), not the backfill"
    )
