"""The typed, versioned messages that cross RabbitMQ queues; nothing else does."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, PlainSerializer, ValidationError

from common.states import ReportedStatus


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
    traceparent: str | None = Field(
        default=None, description="the run's W3C traceparent; absent when it has none"
    )
    app: int | None = Field(
        default=None,
        description="the job's app, by primary key: the worker counts the run's log against "
        "the app's run-log quota; absent from a dispatcher older than the quota",
    )


class DispatchPack(BaseModel):
    """Executions bound for one worker, sent as one message: one delivery, one ack."""

    v: Literal[1] = 1
    executions: list[DispatchMessage] = Field(min_length=1)


class ExecutionResult(BaseModel):
    """How one execution ended on a worker."""

    v: Literal[1] = 1
    execution_id: str
    job_id: int
    worker_id: str
    # Written as its value directly: pydantic's own way with an enum literal doubles the
    # cost of writing a result, and every result is written twice or more.
    status: Annotated[ReportedStatus, PlainSerializer(str, return_type=str, when_used="json")]
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


# The app key alerts go under in the notifier's line (no app has row id 0).
ALERTS_APP_PK = 0


class CallbackMessage(BaseModel):
    """A callback delivery handed to the notifier; the payload is the exact body to sign.

    ``job_id`` keeps a job's callbacks in order in the notifier (one of a job's at a time,
    oldest first); messages published before it was added carry none. An alert carries
    ``alert_rule_pk``, and ``ALERTS_APP_PK`` for its app: alerts share the notifier's
    line as an app of their own."""

    v: Literal[1] = 1
    delivery_id: str
    app_pk: int
    url: str
    payload: str
    attempt: int = 1
    job_id: int | None = None
    # An alert's rule, whose secret signs it (``app_pk`` is then ``ALERTS_APP_PK``).
    alert_rule_pk: int | None = None
    # The run's W3C traceparent, sent with the POST; None: not traced (or not carried:
    # the notifier reads it with the delivery's row).
    traceparent: str | None = None
    # Published by the results consumer right after its delivery was recorded, with no
    # other callback of its job on its way then: its first attempt needs no read of the
    # delivery's row (``services/notifier/delivery.py``). Any copy sent again is not.
    alone: bool = False


class CallbackPack(BaseModel):
    """Callbacks of one app to one URL, sent as one message: one delivery, one ack.

    The results consumer packs the callbacks a batch of results recorded
    (``callback_messages``); every other callback travels alone, as a
    ``CallbackMessage``. ``callbacks`` comes right after ``v`` so that a notifier tells a
    pack from a single callback by the start of its body (``PACK_PREFIX``)."""

    v: Literal[1] = 1
    callbacks: list[CallbackMessage] = Field(min_length=1)


# How every pack's body begins, as pydantic writes it; a single callback's never does.
PACK_PREFIX = b'{"v":1,"callbacks":['
# The most callbacks one pack carries.
CALLBACK_PACK_MAX = 32


M = TypeVar("M", bound=BaseModel)


def read_message(model: type[M], body: bytes | str) -> M | None:
    """``body`` read as ``model``; None when no reading can make one of it.

    JSON text may hold what UTF-8 cannot (a lone surrogate escape), which the strict
    reader refuses: such a body is read again with those characters replaced, so what
    it carries is still used rather than lost.
    """
    try:
        return model.model_validate_json(body)
    except ValidationError:
        pass
    try:
        return model.model_validate(json.loads(body, object_hook=_utf8_safe))
    except (ValueError, RecursionError):
        return None


def _utf8_safe(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v.encode("utf-8", "replace").decode("utf-8") if isinstance(v, str) else v
        for k, v in obj.items()
    }
