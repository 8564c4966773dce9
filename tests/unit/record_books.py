"""The books of a ``MemoryStore`` after results were recorded: every result accounted for.

The unit tier's counterpart of tests/books.py (which reads MySQL): each execution a
result names has ended (with that result's status unless it had ended before), each
ended trigger of a job with a callback URL has exactly one delivery and every other
execution none, and each retry is SCHEDULED at the next attempt of its trigger.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from common.db.executions import UNFINISHED
from common.memory.rows import MemoryExecution
from common.memory.store import MemoryStore
from common.messages import ExecutionResult


def _retried(store: MemoryStore, row: MemoryExecution) -> bool:
    return any(
        (r.job_id, r.trigger_time, r.manual, r.attempt)
        == (row.job_id, row.trigger_time, row.manual, row.attempt + 1)
        for r in store.executions.values()
    )


def books_problems(
    store: MemoryStore,
    results: Sequence[ExecutionResult],
    ended_before: frozenset[str] = frozenset(),
) -> list[str]:
    """Every discrepancy, one line each (empty: the books add up)."""
    problems: list[str] = []
    first: dict[str, ExecutionResult] = {}
    for result in results:
        first.setdefault(result.execution_id, result)
    rows = {r.execution_id: r for r in store.executions.values()}
    for execution_id, result in first.items():
        row = rows.get(execution_id)
        if row is None:
            continue  # a result of no execution of ours: nothing to record
        if row.status in UNFINISHED:
            problems.append(f"{execution_id}: still {row.status}")
        elif execution_id not in ended_before and row.status != result.status:
            problems.append(f"{execution_id}: {row.status}, its result said {result.status}")
    delivered = Counter(d.delivery.execution_id for d in store.deliveries)
    for row in rows.values():
        job = store.jobs[row.job_id]
        ended = row.status not in UNFINISHED and not _retried(store, row)
        wanted = 1 if ended and job.callback_url else 0
        if delivered[row.execution_id] != wanted:
            problems.append(f"{row.execution_id}: {delivered[row.execution_id]} deliveries")
        if _retried(store, row) and row.status in UNFINISHED:
            problems.append(f"{row.execution_id}: retried while unfinished")
    return problems
