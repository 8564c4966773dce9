"""Sending executions to their workers: the one path every execution leaves by.

Whatever brought an execution into being (a claim of a trigger already due, the firer
at a trigger's time, a retry, a manual trigger, a reroute off a dead worker), it leaves
through ``dispatch``: its row is QUEUED on its worker in the caller's transaction, its
pack of executions is published and committed to the broker, and what the broker could
not route is put back to SCHEDULED for the firer, before the caller commits.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.broker import OutgoingMessage, Publisher
from common.db.dispatch_store import DispatchStore, MySqlDispatchStore
from common.db.executions_with_job import ExecutionWithJob
from common.topology import DISPATCH_EXCHANGE
from common.tracing.spans import NO_TRACING, Tracing


@dataclass(frozen=True)
class Assignment:
    """One execution bound for one worker."""

    execution_key: int  # executions.id; ``ref`` in the dispatch message
    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    handler: str
    params_json: str
    worker_id: str
    timeout_seconds: int | None = None
    # The run's W3C traceparent; written into the message only when present.
    traceparent: str | None = None
    # The job's app (primary key), for the worker's run-log quota.
    app_pk: int | None = None

    @classmethod
    def of(cls, row: ExecutionWithJob, worker_id: str) -> Assignment:
        """The assignment of an execution row (read with its job's data) to a worker."""
        return cls(
            execution_key=int(row.id),
            execution_id=row.execution_id,
            job_id=row.job_id,
            attempt=row.attempt,
            trigger_time=row.trigger_time,
            handler=row.handler,
            params_json=row.params,
            worker_id=worker_id,
            timeout_seconds=row.timeout_seconds,
            traceparent=row.traceparent,
            app_pk=row.app_pk,
        )


# Executions per dispatch message at most. The broker's and the workers' cost is per
# message (persisting, routing, delivering, acking); a pack also holds its delivery
# until its last execution ran, so it is kept well below what a worker runs in a
# while. See bench/RESULTS.md for the figures behind the value.
PACK_LIMIT = 50


@dataclass(frozen=True)
class DispatchPacks:
    """Dispatch messages, each carrying executions bound for one worker."""

    assignments: Sequence[Assignment]
    messages: list[OutgoingMessage]
    members: dict[str, list[str]]

    def not_routed(self, returned: set[str]) -> set[str]:
        """The execution ids in the messages the broker returned (ids in ``returned``)."""
        return {e for message_id in returned for e in self.members.get(message_id, ())}


def pack_dispatches(
    assignments: Sequence[Assignment],
    now_ms: int,
    limit: int = PACK_LIMIT,
    tracing: Tracing = NO_TRACING,
) -> DispatchPacks:
    """Group the executions by worker into ``DispatchPack`` messages of ``limit`` at most.

    Each message is named by its first execution's id, which is unique. A traced run
    gets a dispatch span (with ``tracing``), whose traceparent its message carries.
    """
    by_worker: dict[str, list[Assignment]] = {}
    for a in assignments:
        by_worker.setdefault(a.worker_id, []).append(a)
    messages: list[OutgoingMessage] = []
    members: dict[str, list[str]] = {}
    for worker_id, group in by_worker.items():
        for start in range(0, len(group), limit):
            chunk = group[start : start + limit]
            body = b",".join(dispatch_body(traced(a, tracing), now_ms) for a in chunk)
            message_id = chunk[0].execution_id
            messages.append(
                OutgoingMessage(
                    exchange=DISPATCH_EXCHANGE,
                    routing_key=worker_id,
                    body=b'{"v":1,"executions":[' + body + b"]}",
                    message_id=message_id,
                )
            )
            members[message_id] = [a.execution_id for a in chunk]
    return DispatchPacks(assignments, messages, members)


def traced(a: Assignment, tracing: Tracing) -> Assignment:
    """``a`` carrying the traceparent of its dispatch span (as it is, untraced)."""
    if a.traceparent is None:
        return a
    attributes = {"kairos.execution_id": a.execution_id, "kairos.worker_id": a.worker_id}
    with tracing.span("kairos dispatch", a.traceparent, attributes) as handed:
        return a if handed == a.traceparent else dataclasses.replace(a, traceparent=handed)


def dispatch_body(a: Assignment, now_ms: int) -> bytes:
    """A ``DispatchMessage`` as JSON, written directly.

    The fields come from our own rows and the params are stored as JSON text already:
    building the model, parsing the params and serializing it all again would weigh on
    the claim thread. A unit test holds this to what the model itself writes.
    """
    timeout = "null" if a.timeout_seconds is None else int(a.timeout_seconds)
    # Most runs carry no traceparent: they pay nothing for the field.
    trace = "" if a.traceparent is None else f',"traceparent":{json.dumps(a.traceparent)}'
    app = "" if a.app_pk is None else f',"app":{int(a.app_pk)}'
    return (
        f'{{"v":1,"execution_id":{json.dumps(a.execution_id)},"job_id":{int(a.job_id)},'
        f'"attempt":{int(a.attempt)},"trigger_time":{int(a.trigger_time)},'
        f'"handler":{json.dumps(a.handler)},"params":{a.params_json},'
        f'"dispatched_at":{int(now_ms)},"timeout_seconds":{timeout},"ref":{int(a.execution_key)}'
        f"{trace}{app}}}"
    ).encode()


def dispatch(conn: Connection, publisher: Publisher, packs: DispatchPacks) -> set[str]:
    """Publish executions this transaction wrote QUEUED; put back what did not land.

    Returns the ids the broker could not route (no queue for their worker): SCHEDULED
    again, for the firer. The publish is committed to the broker before the caller's
    transaction commits; if that commit then fails, the messages are out but the rows
    are not: the same executions are sent again under the same ids, and the worker that
    took the first copy owns them (see ``ExecutionRunner.admit``).
    """
    if not packs.messages:
        return set()
    return send_packs(MySqlDispatchStore(conn), publisher, packs)


def send_packs(store: DispatchStore, publisher: Publisher, packs: DispatchPacks) -> set[str]:
    """``dispatch`` through a store port: publish the packs, put back what did not land,
    return its execution ids. A failed publish raises before any row is touched."""
    if not packs.messages:
        return set()
    returned = packs.not_routed(publisher.publish(packs.messages))
    store.unmark_queued([a.execution_key for a in packs.assignments if a.execution_id in returned])
    return returned
