"""The books of a ``MemoryStore`` and ``MemoryBroker`` after a rescue sweep: every
execution of a dead worker reported once, moved once, or held.

An execution reported was reported once and ended as reported, and sits in no live
worker's queue. One QUEUED on a live worker runs its handler there and sits in that
queue exactly once, and in no other live queue; one QUEUED on a worker that is not
live stays only where the test says it may (a draining worker's run, a hung worker's
work). One held is SCHEDULED again with no worker, saying why it waits.
"""

from __future__ import annotations

from collections import Counter

from common.memory.broker import MemoryBroker
from common.memory.rows import MemoryExecution
from common.memory.store import MemoryStore
from common.messages import ExecutionResult
from common.states import ExecutionStatus
from tests.unit.fire_books import WAITING, landed


def rescue_books_problems(
    store: MemoryStore,
    broker: MemoryBroker,
    handlers: dict[str, frozenset[str]],
    reported: list[ExecutionResult],
    may_stay: set[str] | frozenset[str],
) -> list[str]:
    """Every discrepancy, one line each (empty: the books add up). ``handlers``: each
    live worker, with its handlers; ``reported``: every result published so far."""
    times = Counter(r.execution_id for r in reported)
    problems = [f"{e}: reported {n} times" for e, n in times.items() if n > 1]
    copies = Counter((w, e) for w in handlers for e in landed(broker, w))
    anywhere = Counter(e for _, e in copies.elements())
    problems += [f"{e}: in live queues {n} times" for e, n in anywhere.items() if n > 1]
    last = {r.execution_id: r for r in reported}
    for row in store.executions.values():
        problems += _row_problems(store, row, copies, handlers, last.get(row.execution_id))
        if row.status is ExecutionStatus.QUEUED and row.worker_id not in handlers:
            if row.execution_id not in may_stay:
                problems.append(f"{row.execution_id}: left on {row.worker_id}")
    return problems


def _row_problems(
    store: MemoryStore,
    row: MemoryExecution,
    copies: Counter[tuple[str, str]],
    handlers: dict[str, frozenset[str]],
    result: ExecutionResult | None,
) -> list[str]:
    e = row.execution_id
    queued_in = [w for w, x in copies if x == e]
    if result is not None:
        problems = [] if row.status == result.status else [f"{e}: reported, yet {row.status}"]
        return problems + [f"{e}: reported, yet in {w}'s queue" for w in queued_in]
    if row.status is ExecutionStatus.QUEUED and row.worker_id in handlers:
        worker = row.worker_id
        runs = store.jobs[row.job_id].handler in handlers[worker]
        problems = [] if runs else [f"{e}: QUEUED on {worker}, which does not run its handler"]
        if copies[(worker, e)] != 1:
            problems.append(f"{e}: QUEUED on {worker}, {copies[(worker, e)]} copies there")
        return problems + [
            f"{e}: QUEUED on {worker}, yet in {w}'s queue" for w in queued_in if w != worker
        ]
    problems = [f"{e}: {row.status} on {row.worker_id}, yet in {w}'s queue" for w in queued_in]
    if row.status is ExecutionStatus.SCHEDULED:
        # Held, saying why; or back from a worker queue no binding reached, due now.
        held = row.message is None or row.message.startswith(WAITING)
        if row.worker_id is not None or row.dispatched_at is not None or not held:
            problems.append(f"{e}: SCHEDULED, not held ({row.worker_id}, {row.message!r})")
    elif row.status is not ExecutionStatus.QUEUED:
        problems.append(f"{e}: {row.status}, never reported")
    return problems
