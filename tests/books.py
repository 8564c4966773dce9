"""The books: after a scenario, every job, execution and callback must be accounted for.

Used by the integration and end-to-end tiers after every scenario that runs jobs. A
scenario passes the job ids it submitted and what it expects of them (one expectation
per group of jobs that should end alike); ``read_books`` reads MySQL and returns every
discrepancy as one line, so a failure names all of them. Given ``Witnesses`` (a
handler's ledger, a callback receiver's log: tests/witnesses.py), it also holds the
tables against what happened outside Kairos.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.cron import next_trigger_ms
from tests.witnesses import Witnesses, check_arrivals, check_effects, check_strangers

FINAL_EXECUTIONS = frozenset({"SUCCEEDED", "FAILED", "LOST", "TIMED_OUT", "SKIPPED", "CANCELLED"})
FINAL_JOBS = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
SETTLED_DELIVERIES = frozenset({"DELIVERED", "DEAD"})
# The executions of a cron job cancelled at the end of its scenario: each trigger ran, was
# skipped (by its misfire or overlap policy, or inside a pause) or was cancelled with it.
CANCELLED_CRON = frozenset({"SUCCEEDED", "SKIPPED", "CANCELLED"})
# The outcomes after which a trigger is tried again (when its job allows retries).
RETRIED_AFTER = frozenset({"FAILED", "LOST", "TIMED_OUT"})


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
    # The most POSTs a callback may take (1: a receiver that accepts each at once, so a
    # retried delivery is a problem); None: any number.
    callback_attempts: int | None = None
    # True: a cron or fixed-rate job has an execution for every trigger of its schedule
    # between the first and the last one it ran (no misfire policy skipped any).
    whole_schedule: bool = False


@dataclass
class Books:
    """What the database says of the scenario's jobs; ``problems`` empty when it adds up."""

    jobs: dict[int, str] = field(default_factory=dict)
    executions: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    deliveries: int = 0
    # Callback requests that reached the receiver beyond the first of their delivery.
    callback_copies: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for a failure message or a log."""
        shown = "\n  ".join(self.problems[:30])
        more = f"\n  ... and {len(self.problems) - 30} more" if len(self.problems) > 30 else ""
        return f"{len(self.problems)} problems in the books:\n  {shown}{more}"


def read_books(engine: Engine, *expected: Expectation, witnesses: Witnesses | None = None) -> Books:
    """Every discrepancy between the database and each of ``expected`` (and, given
    ``witnesses``, between the database and them)."""
    books = Books()
    seen = witnesses or Witnesses()
    delivery_ids: set[str] = set()
    with engine.connect() as conn:
        now_ms = int(conn.execute(sa.text("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000")).scalar_one())
        for expectation in expected:
            delivery_ids |= _read_group(conn, books, expectation, now_ms, seen)
    if seen.arrivals is not None:
        check_strangers(books.problems, delivery_ids, seen.arrivals)
    return books


def _read_group(
    conn: sa.Connection, books: Books, expected: Expectation, now_ms: int, seen: Witnesses
) -> set[str]:
    ids = sorted(int(i) for i in expected.job_ids)
    jobs = _rows(
        conn,
        "SELECT id, status, callback_url, cron_expr, fixed_rate_seconds, timezone, max_retries "
        "FROM jobs WHERE id IN :ids",
        ids,
    )
    executions = _rows(
        conn,
        "SELECT job_id, execution_id, status, attempt, trigger_time, manual, backfill, "
        "scheduled_at, dispatched_at FROM executions WHERE job_id IN :ids",
        ids,
    )
    deliveries = _rows(
        conn,
        "SELECT job_id, execution_id, delivery_id, status, attempts, last_status_code, "
        "last_error FROM callback_deliveries WHERE job_id IN :ids",
        ids,
    )
    books.jobs.update({int(r.id): str(r.status) for r in jobs})
    books.executions += len(executions)
    books.outcomes.update(str(r.status) for r in executions)
    books.deliveries += len(deliveries)
    _check_jobs(books, ids, jobs, executions, expected)
    _check_executions(books, executions, expected, now_ms)
    _check_attempts(books, jobs, executions)
    if expected.whole_schedule:
        _check_schedules(books, jobs, executions)
    _check_callbacks(books, jobs, executions, deliveries, expected)
    if seen.effects is not None:
        check_effects(books.problems, ids, executions, seen.effects)
    if seen.arrivals is not None:
        copies = check_arrivals(books.problems, deliveries, seen.arrivals, seen.extra_posts)
        books.callback_copies += copies
    return {str(d.delivery_id) for d in deliveries}


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
    (manual runs, which leave a job's state alone, do not count), FAILED only with a
    run that says why (even a schedule that cannot be computed leaves one)."""
    if job.cron_expr or job.fixed_rate_seconds or job.status not in {"SUCCEEDED", "FAILED"}:
        return
    if job.status == "FAILED" and not any(not e.manual for e in executions):
        books.problems.append(f"job {job.id}: FAILED with no execution of its trigger")
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
        if row.status == "SUCCEEDED" and (not row.manual or row.backfill):
            succeeded[(int(row.job_id), int(row.trigger_time))] += 1
    # A trigger runs until an attempt succeeds: a second success is a duplicate run (a
    # backfill run counts with the schedule's runs of its trigger time).
    for (job_id, trigger_time), n in succeeded.items():
        if n > 1:
            books.problems.append(f"job {job_id}: trigger {trigger_time} succeeded {n} times")


def _in_flight(row: sa.Row[object], bound_ms: int | None, now_ms: int) -> bool:
    """True when an unfinished execution is still within the bound the scenario allows."""
    if bound_ms is None:
        return False
    if row.status == "QUEUED":
        return row.dispatched_at is not None and now_ms - int(row.dispatched_at) <= bound_ms
    # A row with no send time yet is as late as its trigger.
    due = row.trigger_time if row.scheduled_at is None else row.scheduled_at
    return now_ms - int(due) <= bound_ms


def _check_attempts(
    books: Books, jobs: list[sa.Row[object]], executions: list[sa.Row[object]]
) -> None:
    """Each trigger's attempts run 1, 2, ... with no gap, no more than its job's retries
    allow, and each one after an attempt that ended in a way that is retried."""
    max_retries = {int(j.id): int(j.max_retries) for j in jobs}
    for (job_id, trigger_time, _manual), runs in _by_trigger(executions).items():
        attempts = [int(r.attempt) for r in runs]
        where = f"job {job_id}: trigger {trigger_time}"
        if attempts != list(range(1, len(attempts) + 1)):
            books.problems.append(f"{where} has attempts {attempts}, expected 1 to {len(runs)}")
        elif len(runs) > max_retries.get(job_id, 0) + 1:
            books.problems.append(
                f"{where} has {len(runs)} attempts, its job allows {max_retries[job_id]} retries"
            )
        for before in runs[:-1]:
            if before.status not in RETRIED_AFTER:
                books.problems.append(
                    f"{where}: attempt {before.attempt} {before.status}, and yet retried"
                )


def _by_trigger(
    executions: list[sa.Row[object]],
) -> dict[tuple[int, int, bool], list[sa.Row[object]]]:
    """The executions of each trigger (a manual run apart), by attempt."""
    grouped: dict[tuple[int, int, bool], list[sa.Row[object]]] = {}
    for row in sorted(executions, key=lambda r: int(r.attempt)):
        key = (int(row.job_id), int(row.trigger_time), bool(row.manual))
        grouped.setdefault(key, []).append(row)
    return grouped


def _check_schedules(
    books: Books, jobs: list[sa.Row[object]], executions: list[sa.Row[object]]
) -> None:
    """No trigger of a cron or fixed-rate job's schedule is missing between the first
    and the last trigger it ran."""
    for job in jobs:
        if not (job.cron_expr or job.fixed_rate_seconds):
            continue
        mine = [
            e for e in executions if int(e.job_id) == int(job.id) and (not e.manual or e.backfill)
        ]
        ran = sorted({int(e.trigger_time) for e in mine})
        for earlier, later in itertools.pairwise(ran):
            expected = _next_trigger(job, earlier)
            if expected != later:
                books.problems.append(
                    f"job {job.id}: trigger {earlier} is followed by {later}, "
                    f"its schedule says {expected}"
                )


def _next_trigger(job: sa.Row[object], after_ms: int) -> int | None:
    if job.fixed_rate_seconds:
        return after_ms + int(job.fixed_rate_seconds) * 1000
    return next_trigger_ms(str(job.cron_expr), after_ms, str(job.timezone))


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
    """True when no later attempt of the same trigger follows this one (it ended its
    trigger); another trigger's attempts, or a manual run's, do not count."""
    return not any(
        int(o.job_id) == int(row.job_id)
        and int(o.trigger_time) == int(row.trigger_time)
        and bool(o.manual) == bool(row.manual)
        and int(o.attempt) > int(row.attempt)
        for o in executions
    )


def _check_delivery(books: Books, delivery: sa.Row[object], expected: Expectation) -> None:
    status = str(delivery.status)
    where = f"job {delivery.job_id}: callback of {delivery.execution_id}"
    if expected.callbacks == "recorded":
        return
    bound = expected.callback_attempts
    if bound is not None and int(delivery.attempts) > bound:
        books.problems.append(f"{where} took {delivery.attempts} POSTs, expected at most {bound}")
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
    witnesses: Callable[[], Witnesses] | None = None,
) -> Books:
    """Read the books until they add up or ``timeout`` passes; return the last reading.
    ``witnesses`` is read again before each reading (a ledger still being written)."""
    deadline = time.monotonic() + timeout
    while True:
        books = read_books(engine, *expected, witnesses=witnesses() if witnesses else None)
        if progress is not None:
            progress(books)
        if not books.problems or time.monotonic() > deadline:
            return books
        time.sleep(0.5)


def assert_books(
    engine: Engine,
    *expected: Expectation,
    timeout: float,
    witnesses: Callable[[], Witnesses] | None = None,
) -> Books:
    """Wait for the books to add up; fail with every discrepancy when they do not.
    Read the witnesses only once the system is quiet: a late copy must be seen."""
    books = wait_for_books(engine, *expected, timeout=timeout, witnesses=witnesses)
    if books.problems:
        pytest.fail(books.summary(), pytrace=False)
    return books
