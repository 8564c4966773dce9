"""The books: after a scenario, every job, execution and callback must be accounted for.

Used by the integration and end-to-end tiers after every scenario that runs jobs. A
scenario passes the job ids it submitted and what it expects of them; ``check_books``
reads MySQL and returns every discrepancy as one line, so a failure names all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

FINAL_EXECUTIONS = {"SUCCEEDED", "FAILED", "LOST", "TIMED_OUT", "SKIPPED", "CANCELLED"}
FINAL_JOBS = {"SUCCEEDED", "FAILED", "CANCELLED"}
SETTLED_DELIVERIES = {"DELIVERED", "DEAD"}


@dataclass(frozen=True)
class Expectation:
    """What a scenario expects of the jobs it submitted."""

    job_ids: Collection[int]
    job_statuses: Collection[str] = frozenset({"SUCCEEDED"})
    # "delivered": every callback taken by its receiver; "settled": DELIVERED or DEAD
    # with a reason; "recorded": a delivery row exists (no notifier in the scenario).
    callbacks: Literal["delivered", "settled", "recorded"] = "delivered"


@dataclass
class Books:
    """What the database says of the scenario's jobs; ``problems`` empty when it adds up."""

    jobs: dict[int, str] = field(default_factory=dict)
    executions: int = 0
    deliveries: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for a failure message or a log."""
        shown = "\n  ".join(self.problems[:30])
        more = f"\n  ... and {len(self.problems) - 30} more" if len(self.problems) > 30 else ""
        return f"{len(self.problems)} problems in the books:\n  {shown}{more}"


def read_books(engine: Engine, expected: Expectation) -> Books:
    """Every discrepancy between the database and ``expected``."""
    books = Books()
    ids = sorted(int(i) for i in expected.job_ids)
    with engine.connect() as conn:
        jobs = _rows(conn, "SELECT id, status, callback_url FROM jobs WHERE id IN :ids", ids)
        executions = _rows(
            conn,
            "SELECT job_id, execution_id, status, attempt, manual FROM executions "
            "WHERE job_id IN :ids",
            ids,
        )
        deliveries = _rows(
            conn,
            "SELECT job_id, execution_id, status, last_status_code, last_error "
            "FROM callback_deliveries WHERE job_id IN :ids",
            ids,
        )
    books.jobs = {int(r.id): str(r.status) for r in jobs}
    books.executions = len(executions)
    books.deliveries = len(deliveries)
    _check_jobs(books, ids, expected)
    _check_executions(books, executions)
    _check_callbacks(books, jobs, executions, deliveries, expected)
    return books


def _rows(conn: sa.Connection, sql: str, ids: list[int]) -> list[sa.Row[object]]:
    if not ids:
        return []
    statement = sa.text(sql).bindparams(sa.bindparam("ids", expanding=True))
    return list(conn.execute(statement, {"ids": ids}))


def _check_jobs(books: Books, ids: list[int], expected: Expectation) -> None:
    for job_id in ids:
        status = books.jobs.get(job_id)
        if status is None:
            books.problems.append(f"job {job_id}: no row")
        elif status not in expected.job_statuses:
            books.problems.append(
                f"job {job_id}: {status}, expected {sorted(expected.job_statuses)}"
            )


def _check_executions(books: Books, executions: list[sa.Row[object]]) -> None:
    seen: dict[tuple[int, int], int] = {}
    for row in executions:
        if row.status not in FINAL_EXECUTIONS:
            books.problems.append(
                f"job {row.job_id}: execution {row.execution_id} still {row.status}"
            )
        if row.status == "SUCCEEDED" and not row.manual:
            key = (int(row.job_id), int(row.attempt))
            seen[key] = seen.get(key, 0) + 1
    for (job_id, attempt), n in seen.items():
        if n > 1:
            books.problems.append(f"job {job_id}: attempt {attempt} succeeded {n} times")


def _check_callbacks(
    books: Books,
    jobs: list[sa.Row[object]],
    executions: list[sa.Row[object]],
    deliveries: list[sa.Row[object]],
    expected: Expectation,
) -> None:
    by_execution = {str(d.execution_id): d for d in deliveries}
    with_callback = {int(j.id) for j in jobs if j.callback_url}
    for row in executions:
        if int(row.job_id) not in with_callback or row.status in {"SKIPPED", "CANCELLED"}:
            continue
        if row.status not in FINAL_EXECUTIONS:
            continue
        delivery = by_execution.get(str(row.execution_id))
        if delivery is None:
            if _ends_trigger(row, executions):
                books.problems.append(
                    f"job {row.job_id}: execution {row.execution_id} ended with no callback"
                )
            continue
        _check_delivery(books, delivery, expected)


def _ends_trigger(row: sa.Row[object], executions: list[sa.Row[object]]) -> bool:
    """True when no later attempt of the same job follows this one (it ended its trigger)."""
    return not any(
        int(o.job_id) == int(row.job_id) and int(o.attempt) > int(row.attempt) for o in executions
    )


def _check_delivery(books: Books, delivery: sa.Row[object], expected: Expectation) -> None:
    status = str(delivery.status)
    where = f"job {delivery.job_id}: callback of {delivery.execution_id}"
    if expected.callbacks == "recorded":
        return
    if status not in SETTLED_DELIVERIES:
        books.problems.append(f"{where} still {status}")
    elif status == "DEAD" and not (delivery.last_error or delivery.last_status_code):
        books.problems.append(f"{where} DEAD with no reason")
    elif expected.callbacks == "delivered" and status != "DELIVERED":
        books.problems.append(f"{where} {status}, expected DELIVERED")


def wait_for_books(
    engine: Engine,
    expected: Expectation,
    timeout: float,
    progress: Callable[[Books], None] | None = None,
) -> Books:
    """Read the books until they add up or ``timeout`` passes; return the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        books = read_books(engine, expected)
        if progress is not None:
            progress(books)
        if not books.problems or time.monotonic() > deadline:
            return books
        time.sleep(0.5)


def assert_books(engine: Engine, expected: Expectation, timeout: float) -> Books:
    """Wait for the books to add up; fail with every discrepancy when they do not."""
    books = wait_for_books(engine, expected, timeout)
    if books.problems:
        pytest.fail(books.summary(), pytrace=False)
    return books
