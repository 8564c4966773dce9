"""Request and response bodies of the OpenAPI, named as the clients see them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
        description="5 fields (min hour dom mon dow) or 6 with seconds first; UTC",
    )
    triggerAt: str | int | None = Field(
        default=None, description="ISO 8601 or epoch ms; absent means now"
    )
    callbackUrl: str | None = Field(default=None, max_length=2048)
    clientRequestId: str | None = Field(default=None, min_length=1, max_length=128)


class JobAccepted(BaseModel):
    """The answer to a create: the job id and its status."""

    jobId: int
    status: str


class ExecutionView(BaseModel):
    """One attempt at one trigger."""

    executionId: str
    attempt: int
    triggerTime: str | None
    workerId: str | None
    status: str
    startedAt: str | None
    endedAt: str | None
    message: str | None
    result: Any = None


class JobView(BaseModel):
    """A job as stored, with its last execution."""

    jobId: int
    jobName: str
    jobHandler: str
    params: dict[str, Any]
    cronExpr: str | None
    status: str
    nextTriggerTime: str | None
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
