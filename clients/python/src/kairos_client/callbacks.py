"""Callbacks as an app sees them: its deliveries (``Client.callbacks``) and the event
a receiver gets (``verify_webhook``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kairos_client._reading import Reader, parse_time
from kairos_client.enums import CallbackState, ExecutionStatus

EXECUTION_FINISHED = "execution.finished"
"""The event type of a callback: a trigger's last attempt ended."""


@dataclass(frozen=True)
class CallbackAttempt:
    """One try at delivering a callback: when, the receiver's status code or the error,
    and how long it took."""

    at: datetime | None
    status_code: int | None
    error: str | None
    duration_ms: float | None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Any, what: str) -> CallbackAttempt:
        """Read one attempt (``at``, ``statusCode``, ``error``, ``durationMs``)."""
        r = Reader(body, what)
        moment = next((n for n in ("at", "time", "attemptedAt") if n in r.body), "at")
        return cls(
            at=r.time_or_none(moment),
            status_code=r.integer_or_none("statusCode"),
            error=r.text_or_none("error"),
            duration_ms=r.number_or_none("durationMs"),
            raw=r.body,
        )


@dataclass(frozen=True)
class CallbackDelivery:
    """The callback of one execution: its state, every attempt, and when the next
    attempt is due (None once DELIVERED or DEAD)."""

    delivery_id: str
    execution_id: str
    state: CallbackState | str
    attempts: list[CallbackAttempt]
    next_attempt_at: datetime | None
    dead_reason: str | None = None
    """When DEAD: ``exhausted`` (every attempt failed), ``gone`` (the receiver said 410) or
    ``refused`` (the server's callback URL policy refused the URL at send time)."""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Any, what: str = "delivery") -> CallbackDelivery:
        """Read one delivery of ``GET /openapi/jobs/{jobId}/callbacks``."""
        r = Reader(body, what)
        attempts = r.items("attempts")
        return cls(
            delivery_id=r.identifier("deliveryId"),
            execution_id=r.text("executionId"),
            state=r.choice("state", CallbackState),
            attempts=[
                CallbackAttempt.from_json(a, f"{what}.attempts[{n}]")
                for n, a in enumerate(attempts)
            ],
            next_attempt_at=r.time_or_none("nextAttemptAt"),
            dead_reason=r.text_or_none("deadReason"),
            raw=r.body,
        )


def deliveries_of(body: Any) -> tuple[list[CallbackDelivery], str | None]:
    """The deliveries of one answer and its next cursor.

    The answer is an object holding them as ``deliveries`` (or ``callbacks``), with an
    optional ``nextCursor``; a bare array is read too.
    """
    if isinstance(body, list):
        rows, cursor = body, None
    else:
        r = Reader(body, "callbacks")
        name = "callbacks" if "callbacks" in r.body and "deliveries" not in r.body else "deliveries"
        rows, cursor = r.items(name), r.text_or_none("nextCursor")
    found = [CallbackDelivery.from_json(row, f"deliveries[{n}]") for n, row in enumerate(rows)]
    return found, cursor


@dataclass(frozen=True)
class CallbackEvent:
    """A verified callback: ``type`` (``execution.finished``) and the execution's end.

    Read from Standard Webhooks' envelope (``{"type", "timestamp", "data": {...}}``);
    a flat body, as servers before the envelope send, is read as the envelope's data.
    """

    type: str
    timestamp: datetime | None
    job_id: int
    execution_id: str
    status: ExecutionStatus | str
    attempt: int | None
    message: str | None
    job_name: str | None
    client_request_id: str | None
    result: Any
    trigger_time: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Any) -> CallbackEvent:
        """Read a callback body (envelope or flat)."""
        outer = Reader(body, "callback")
        enveloped = isinstance(outer.body.get("data"), Mapping)
        r = Reader(outer.body["data"], "callback.data") if enveloped else outer
        return cls(
            type=outer.text("type") if enveloped else EXECUTION_FINISHED,
            timestamp=parse_time(outer.body.get("timestamp")) if enveloped else None,
            job_id=r.integer("jobId"),
            execution_id=r.text("executionId"),
            status=r.choice("status", ExecutionStatus),
            attempt=r.integer_or_none("attempt"),
            message=r.text_or_none("message"),
            job_name=r.text_or_none("jobName"),
            client_request_id=r.text_or_none("clientRequestId"),
            result=r.body.get("result"),
            trigger_time=r.time_or_none("triggerTime"),
            started_at=r.time_or_none("startedAt"),
            ended_at=r.time_or_none("endedAt"),
            raw=outer.body,
        )
