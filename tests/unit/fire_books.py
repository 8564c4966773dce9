"""The books of a ``MemoryStore`` and ``MemoryBroker`` after firing: every execution
accounted for, once.

An execution that left is QUEUED on one worker that runs its handler, and sits in that
worker's queue exactly once and in no other; one that did not leave is still SCHEDULED
with why it waits in its message and a time after now (held), or not due yet; or it
ended, SKIPPED or CANCELLED with why (or run and reported, off its queue by then); and
nothing sits in a queue that no QUEUED row points at.
"""

from __future__ import annotations

from collections import Counter

from common.db.executions_with_job import SLOT_WAIT
from common.memory.broker import MemoryBroker
from common.memory.rows import MemoryExecution
from common.memory.store import MemoryStore
from common.messages import DispatchPack
from common.states import ExecutionStatus
from common.topology import worker_queue

WAITING = "waiting: "


def landed(broker: MemoryBroker, worker_id: str) -> list[str]:
    """The execution ids in the worker's queue, message after message."""
    packs = [
        DispatchPack.model_validate_json(m.body) for m in broker.messages(worker_queue(worker_id))
    ]
    return [e.execution_id for p in packs for e in p.executions]


def fire_books_problems(
    store: MemoryStore, broker: MemoryBroker, handlers: dict[str, frozenset[str]], now_ms: int
) -> list[str]:
    """Every discrepancy after firing what is due at ``now_ms``, one line each (empty:
    the books add up). ``handlers``: each worker that has a queue, with its handlers."""
    copies = Counter((w, e) for w in handlers for e in landed(broker, w))
    anywhere = Counter(e for _, e in copies.elements())
    problems = [f"{e}: in queues {n} times" for e, n in anywhere.items() if n > 1]
    for row in store.executions.values():
        problems += _row_problems(store, row, copies, handlers, now_ms)
    known = {r.execution_id for r in store.executions.values()}
    problems += [f"{e}: in a queue, no such execution" for e in anywhere if e not in known]
    return problems


def _row_problems(
    store: MemoryStore,
    row: MemoryExecution,
    copies: Counter[tuple[str, str]],
    handlers: dict[str, frozenset[str]],
    now_ms: int,
) -> list[str]:
    e = row.execution_id
    if row.status is ExecutionStatus.QUEUED:
        worker = row.worker_id or ""
        runs = store.jobs[row.job_id].handler in handlers.get(worker, frozenset())
        problems = [] if runs else [f"{e}: QUEUED on {worker}, which does not run its handler"]
        if copies[(worker, e)] != 1:
            problems.append(f"{e}: QUEUED on {worker}, {copies[(worker, e)]} copies there")
        return problems
    if any(key[1] == e for key in copies):
        return [f"{e}: {row.status} but in a queue"]
    if row.status is ExecutionStatus.SCHEDULED:
        if row.worker_id is not None or row.dispatched_at is not None:
            return [f"{e}: SCHEDULED yet marked sent to {row.worker_id}"]
        later = row.scheduled_at is not None and row.scheduled_at > now_ms
        held = row.message is not None and row.message.startswith(WAITING)
        if later and (held or row.message is None):
            return []
        if row.message == SLOT_WAIT:
            return []  # due, waiting for a free slot
        return [f"{e}: SCHEDULED at {row.scheduled_at}, left behind ({row.message!r})"]
    if row.ended_at is None:
        return [f"{e}: {row.status} with no end time"]
    if row.status in (ExecutionStatus.SKIPPED, ExecutionStatus.CANCELLED) and not row.message:
        return [f"{e}: {row.status} with no reason"]
    return []  # skipped or cancelled with why, or run and reported (taken off its queue)
