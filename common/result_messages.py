"""The messages that carry outcomes to ``kairos.results``, from workers and stand-ins.

Workers publish what their runs did; the leading dispatcher and operators publish
stand-in results for runs no worker will ever report (a dead worker, a timeout, a
dispatch that was lost, an operator's decision). Both go through the one results path,
so a stand-in and a real result of the same execution settle it once: whichever the
results consumer reads first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from common.broker import OutgoingMessage, Publisher
from common.messages import ExecutionResult, ResultBatch, read_message
from common.states import ExecutionStatus, StandInStatus
from common.topology import RESULTS_EXCHANGE, RESULTS_QUEUE


class Identified(Protocol):
    """What any result needs to name its execution: ids, and the row key when known."""

    @property
    def execution_id(self) -> str: ...

    @property
    def job_id(self) -> int: ...

    @property
    def ref(self) -> int | None: ...


class Unreported(Protocol):
    """What a stand-in result needs of an execution row."""

    @property
    def id(self) -> int: ...

    @property
    def execution_id(self) -> str: ...

    @property
    def job_id(self) -> int: ...

    @property
    def worker_id(self) -> str | None: ...


@dataclass(frozen=True)
class _Row:
    """An execution row named as a result names it (its primary key is ``ref``)."""

    row: Unreported

    @property
    def execution_id(self) -> str:
        return self.row.execution_id

    @property
    def job_id(self) -> int:
        return int(self.row.job_id)

    @property
    def ref(self) -> int | None:
        return int(self.row.id)


def results_message(sender_id: str, results: Sequence[ExecutionResult]) -> OutgoingMessage:
    """One results message carrying ``results`` (at least one), as ``sender_id`` sends it."""
    batch = ResultBatch(worker_id=sender_id, results=list(results))
    return OutgoingMessage(
        exchange=RESULTS_EXCHANGE,
        routing_key=RESULTS_QUEUE,
        body=batch.model_dump_json().encode(),
        message_id=results[0].execution_id,
    )


def written_results_message(sender_id: str, results: Sequence[tuple[str, str]]) -> OutgoingMessage:
    """``results_message`` of results already written as JSON: (execution id, JSON text)
    pairs, at least one, each ``ExecutionResult.model_dump_json`` of its result.

    A worker writes each result once, for its started key, and the results message is
    put together from the same texts instead of writing every result a second time.
    """
    sender = json.dumps(sender_id, ensure_ascii=False)
    texts = ",".join(text for _, text in results)
    return OutgoingMessage(
        exchange=RESULTS_EXCHANGE,
        routing_key=RESULTS_QUEUE,
        body=f'{{"v":1,"worker_id":{sender},"results":[{texts}]}}'.encode(),
        message_id=results[0][0],
    )


def results_messages(
    sender_id: str, outcomes: Sequence[ExecutionResult | None]
) -> list[OutgoingMessage]:
    """The outcomes that ended together (Nones skipped) as one results message; none
    when there is no outcome."""
    results = [o for o in outcomes if o is not None]
    return [results_message(sender_id, results)] if results else []


def stand_in_result(
    execution: Identified, worker_id: str, status: StandInStatus, why: str, now_ms: int
) -> ExecutionResult:
    """A result that ends ``execution`` with ``status`` at ``now_ms``, for a run that will
    never report one of its own (or whose report cannot be read)."""
    return ExecutionResult(
        execution_id=execution.execution_id,
        job_id=int(execution.job_id),
        worker_id=worker_id,
        status=status,
        message=why,
        started_at=now_ms,
        ended_at=now_ms,
        ref=execution.ref,
    )


def stand_in_results(
    rows: Sequence[Unreported], status: StandInStatus, why: str, now_ms: int
) -> list[ExecutionResult]:
    """Results that end these executions with ``status`` on their worker's behalf."""
    return [stand_in_result(_Row(r), r.worker_id or "unknown", status, why, now_ms) for r in rows]


def publish_results(
    publisher: Publisher, sender_id: str, results: Sequence[ExecutionResult]
) -> None:
    """Publish and commit ``results`` as one results message (nothing when empty)."""
    if results:
        publisher.publish(results_messages(sender_id, results))


def stored_result(outcome: str, row: Unreported, now_ms: int) -> ExecutionResult:
    """The result a worker stored with an execution's started key; a FAILED stand-in
    saying so when it cannot be read, so the execution still ends."""
    result = read_message(ExecutionResult, outcome)
    if result is not None:
        return result
    why = "its worker stored an outcome that cannot be read"
    return stand_in_results([row], ExecutionStatus.FAILED, why, now_ms)[0]
