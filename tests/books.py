"""The books: after a scenario, every job, execution and callback must be accounted for.

Used by the integration and end-to-end tiers after every scenario that runs jobs. A
scenario passes the job ids it submitted and what it expects of them (one expectation
per group of jobs that should end alike); ``read_books`` reads MySQL and returns every
discrepancy as one line, so a failure names all of them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

FINAL_EXECUTIONS = frozenset({"SUCCEEDED", "FAILED", "LOST", "TIMED_OUT", "SKIPPED", "CANCELLED"})
FINAL_JOBS = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
SETTLED_DELIVERIES = frozenset({"DELIVERED", "DEAD"})
# The executions of a cron job cancelled at the end of its scenario: each trigger ran, was
# skipped (by its misfire or overlap policy, or inside a pause) or was cancelled with it.
CANCELLED_CRON = frozenset({"SUCCEEDED", "SKIPPED", "CANCELLED"})


@dataclass(frozen=True)
class Expectation:
    """What a scenario expects of a group of the jobs it submitted."""

    job_ids: Collection[int]
    job_statuses: Collection[str] = frozenset({"SUCCEEDED"})
    # Every execution of these jobs ends in one of these.
    execution_statuses: Collection[str] = FINAL_EXECUTIONS
    # "delivered": every callback taken by its receiver; "dead": every callback parked
    # DEAD with a reason (the receiver refuses); "settled": DELIVERED or DEAD with a
    # reason; "recorded": a delivery row exists (no notifier in the scenario).
    callbacks: Literal["delivered", "dead", "settled", "recorded"] = "delivered"
    # None: every execution has ended. A bound, for jobs that still run (cron jobs looked
    # at mid-scenario): an execution may be under way, but none QUEUED longer than this
    # nor SCHEDULED this long past its time.
    in_flight_ms: int | None = None


@dataclass
class Books:
    """What the database says of the scenario's jobs; ``problems`` empty when it adds up."""

    jobs: dict[int, str] = field(default_factory=dict)
    executions: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for a failure message or a log."""
        shown = "\n  ".join(self.problems[:30])
        more = f"\n  ... and {len(self.problems) - 30} more" if len(self.problems) > 30 else ""
        return f"{len(self.problems)} problems in the books:\n  {shown}{more}"


def read_books(engine: Engine, *expected: Expectation) -> Books:
    """Every discrepancy between the database and each of ``expected``."""
    books = Books()
    with engine.connect() as conn:
        now_ms = int(conn.execute(sa.text("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000")).scalar_one())
        for expectation in expected:
            _read_group(conn, books, expectation, now_ms)
    return books


def _read_group(conn: sa.Connection, books: Books, expected: Expectation, now_ms: int) -> None:
    ids = sorted(int(i) for i in expected.job_ids)
    jobs = _rows(
        conn,
        "SELECT id, status, callback_url, cron_expr, fixed_rate_seconds FROM jobs WHERE id IN :ids",
        ids,
    )
    executions = _rows(
        conn,
        "SELECT job_id, execution_id, status, attempt, trigger_time, manual, scheduled_at, "
        "dispatched_at FROM executions WHERE job_id IN :ids",
        ids,
    )
    deliveries = _rows(
        conn,
        "SELECT job_id, execution_id, status, last_status_code, last_error "
        "FROM callback_deliveries WHERE job_id IN :ids",
        ids,
    )
    books.jobs.update({int(r.id): str(r.status) for r in jobs})
    books.executions += len(executions)
    books.outcomes.update(str(r.status) for r in executions)
    books.deliveries += len(deliveries)
    _check_jobs(books, ids, jobs, executions, expected)
    _check_executions(books, executions, expected, now_ms)
    _check_callbacks(books, jobs, executions, deliveries, expected)


def _rows(conn: sa.Connection, sql: str, ids: list[int]) -> list[sa.Row[object]]:
    if not ids:
        return []
    statement = sa.text(sql).bindparams(sa.bindparam("ids", expanding=True))
    return list(conn.execute(statement, {"ids": ids}))


def _check_jobs(
    books: Books,
    ids: list[int],
    jobs: list[sa.Row[object]],
    executions: list[sa.Row[object]],
    expected: Expectation,
) -> None:
    found = {int(j.id): j for j in jobs}
    for job_id in ids:
        job = found.get(job_id)
        if job is None:
            books.problems.append(f"job {job_id}: no row")
        elif job.status not in expected.job_statuses:
            books.problems.append(
                f"job {job_id}: {job.status}, expected {sorted(expected.job_statuses)}"
            )
        else:
            _check_one_shot_outcome(books, job, [e for e in executions if e.job_id == job_id])


def _check_one_shot_outcome(
    books: Books, job: sa.Row[object], executions: list[sa.Row[object]]
) -> None:
    """A one-shot job ends as its trigger did: SUCCEEDED only when a run of it succeeded
    (manual runs, which leave a job's state alone, do not count)."""
    if job.cron_expr or job.fixed_rate_seconds or job.status not in {"SUCCEEDED", "FAILED"}:
        return
    succeeded = any(e.status == "SUCCEEDED" and not e.manual for e in executions)
    if succeeded != (job.status == "SUCCEEDED"):
        ran = "a run of its trigger succeeded" if succeeded else "no run of its trigger succeeded"
        books.problems.append(f"job {job.id}: {job.status}, but {ran}")


def _check_executions(
    books: Books, executions: list[sa.Row[object]], expected: Expectation, now_ms: int
) -> None:
    succeeded: Counter[tuple[int, int]] = Counter()
    for row in executions:
        where = f"job {row.job_id}: execution {row.execution_id}"
        if row.status not in FINAL_EXECUTIONS:
            if not _in_flight(row, expected.in_flight_ms, now_ms):
                books.problems.append(f"{where} still {row.status}")
        elif row.status not in expected.execution_statuses:
            books.problems.append(
                f"{where} {row.status}, expected {sorted(expected.execution_statuses)}"
            )
        if row.status == "SUCCEEDED" and not row.manual:
            succeeded[(int(row.job_id), int(row.trigger_time))] += 1
    # A trigger runs until an attempt succeeds: a second success is a duplicate run.
    for (job_id, trigger_time), n in succeeded.items():
        if n > 1:
            books.problems.append(f"job {job_id}: trigger {trigger_time} succeeded {n} times")


def _in_flight(row: sa.Row[object], bound_ms: int | None, now_ms: int) -> bool:
    """True when an unfinished execution is still within the bound the scenario allows."""
    if bound_ms is None:
        return False
    if row.status == "QUEUED":
        return row.dispatched_at is not None and now_ms - int(row.dispatched_at) <= bound_ms
    return row.scheduled_at is None or now_ms - int(row.scheduled_at) <= bound_ms


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
    elif expected.callbacks in {"delivered", "dead"} and status != expected.callbacks.upper():
        books.problems.append(f"{where} {status}, expected {expected.callbacks.upper()}")


def wait_for_books(
    engine: Engine,
    *expected: Expectation,
    timeout: float,
    progress: Callable[[Books], None] | None = None,
) -> Books:
    """Read the books until they add up or ``timeout`` passes; return the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        books = read_books(engine, *expected)
        if progress is not None:
            progress(books)
        if not books.problems or time.monotonic() > deadline:
            return books
        time.sleep(0.5)


def assert_books(engine: Engine, *expected: Expectation, timeout: float) -> Books:
    """Wait for the books to add up; fail with every discrepancy when they do not."""
    books = wait_for_books(engine, *expected, timeout=timeout)
    if books.problems:
        pytest.fail(books.summary(), pytrace=False)
    return books
