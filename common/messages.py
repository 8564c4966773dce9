"""The typed, versioned messages that cross RabbitMQ queues; nothing else does."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class DispatchMessage(BaseModel):
    """One execution sent to one worker's queue."""

    v: Literal[1] = 1
    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    handler: str
    params: dict[str, Any]
    dispatched_at: int
    timeout_seconds: int | None = None
    ref: int | None = Field(
        default=None, description="the execution's primary key, echoed back in the result"
    )


class DispatchBatch(BaseModel):
    """Executions bound for one worker, sent as one message: one delivery, one ack.

    Workers read a lone ``DispatchMessage`` as well (what older dispatchers sent).
    """

    v: Literal[1] = 1
    executions: list[DispatchMessage] = Field(min_length=1)


class ExecutionResult(BaseModel):
    """How one execution ended on a worker."""

    v: Literal[1] = 1
    execution_id: str
    job_id: int
    worker_id: str
    status: Literal["SUCCEEDED", "FAILED", "LOST", "TIMED_OUT"]
    message: str | None = None
    result: str | None = None
    started_at: int
    ended_at: int
    ref: int | None = Field(
        default=None, description="the execution's primary key, as the dispatch message gave it"
    )


class ResultBatch(BaseModel):
    """Results a worker finished close together, sent as one message with one commit."""

    v: Literal[1] = 1
    worker_id: str
    results: list[ExecutionResult] = Field(min_length=1)


class CallbackMessage(BaseModel):
    """A callback delivery handed to the notifier; the payload is the exact body to sign."""

    v: Literal[1] = 1
    delivery_id: str
    app_id: int
    url: str
    payload: str
    attempt: int = 1
