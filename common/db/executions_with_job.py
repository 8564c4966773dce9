"""Unfinished executions read with their job's data: what the stages that send, rescue
and time out executions decide with, as typed rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.db import driver
from common.db.rows import AnyRow
from common.db.stuck_executions import Page
from common.dependencies import waits_for_parents
from common.fair_share import AGING_MS
from common.states import ExecutionStatus, JobStatus


@dataclass(frozen=True, slots=True)
class ExecutionWithJob:
    """An unfinished execution and the parts of its job that decide where it goes."""

    id: int
    execution_id: str
    job_id: int
    attempt: int
    trigger_time: int
    scheduled_at: int
    worker_id: str | None
    status: ExecutionStatus
    manual: bool
    handler: str
    # The run's own params (a trigger with params) when it has them, else the job's.
    params: str
    timeout_seconds: int | None
    overlap_policy: str
    misfire_policy: str
    misfire_threshold_seconds: int
    next_trigger_time: int | None
    job_status: JobStatus
    recurring: bool
    dispatched_at: int | None = None
    app_pk: int = 0
    priority: int = 5
    # It waited for a free slot before (``SLOT_WAIT``): its trigger was met by Kairos,
    # so the misfire policy does not judge it late.
    waited: bool = False
    # The W3C traceparent the run carries to its worker, or None.
    traceparent: str | None = None
    # Its job waits for other jobs' runs (``job_dependencies``), and when it was made.
    has_dependencies: bool = False
    job_created_at: int = 0
    # Some job waits for its job's runs (``jobs.has_children``): a run that ends wakes them.
    has_children: bool = False

    @classmethod
    def from_row(cls, row: AnyRow) -> ExecutionWithJob:
        """The record of a row read by the queries below (``_WITH_JOB``)."""
        return cls(
            int(row.id),
            str(row.execution_id),
            int(row.job_id),
            int(row.attempt),
            int(row.trigger_time),
            int(row.scheduled_at),
            row.worker_id,
            ExecutionStatus(row.status),
            bool(row.manual),
            str(row.handler),
            str(row.params),
            row.timeout_seconds,
            str(row.overlap_policy),
            str(row.misfire_policy),
            int(row.misfire_threshold_seconds),
            row.next_trigger_time,
            JobStatus(row.job_status),
            bool(row.recurring),
            None if row.dispatched_at is None else int(row.dispatched_at),
            int(row.app_pk),
            int(row.priority),
            bool(row.waited),
            row.traceparent,
            bool(row.has_dependencies),
            int(row.job_created_at),
            bool(row.has_children),
        )

    @property
    def first_scheduled_attempt(self) -> bool:
        """A claimed trigger's first attempt: not a retry, not a manual run."""
        return self.attempt == 1 and not self.manual

    @property
    def waits_for_parents(self) -> bool:
        """Whether the firer must look up its job's parents before it is sent: a claimed
        trigger's first attempt of a job with dependencies (a retry already waited)."""
        return waits_for_parents(self.has_dependencies, self.attempt, self.manual)


# The message of a due execution that waits for a free slot: the fair share sends it when
# its app's turn comes. Written once, when it first waits.
SLOT_WAIT = "waiting for a free slot: other runs hold every slot it may take"

_COLUMNS = (
    "e.id, e.execution_id, e.job_id, e.attempt, e.trigger_time, e.scheduled_at, "
    "e.worker_id, e.status, e.manual, j.handler, COALESCE(e.params, j.params) AS params, "
    "j.timeout_seconds, "
    "j.overlap_policy, j.misfire_policy, j.misfire_threshold_seconds, "
    "j.next_trigger_time, j.status AS job_status, "
    "(j.cron_expr IS NOT NULL OR j.fixed_rate_seconds IS NOT NULL) AS recurring, "
    f"e.dispatched_at, j.app_pk, j.priority, (e.message = '{SLOT_WAIT}') AS waited, "
    "e.traceparent, j.has_dependencies, j.created_at AS job_created_at, j.has_children"
)
_WITH_JOB = f"SELECT {_COLUMNS} FROM executions e JOIN jobs j ON j.id = e.job_id "


def scheduled_until(
    conn: Connection, until_ms: int, per_app: int, aging_ms: int = AGING_MS
) -> list[ExecutionWithJob]:
    """SCHEDULED executions due by ``until_ms``, with their job's data: each app's first
    ``per_app`` in its own order (``scheduled_at - priority * aging_ms``, then key),
    soonest first.

    Per app, so that one app's backlog cannot keep another app's due runs out of what
    the firer holds; an app's order is the one its runs leave in (``fair_share``).
    """
    # Ranked on narrow rows, then joined for the job's data: ranking the full rows
    # (params and all) would sort every waiting run's data on each load.
    rows = driver.fetch(
        conn,
        f"SELECT {_COLUMNS} FROM (SELECT e.id AS pick, ROW_NUMBER() OVER "
        "(PARTITION BY j.app_pk ORDER BY e.scheduled_at - j.priority * %s, e.id) AS app_rank "
        "FROM executions e JOIN jobs j ON j.id = e.job_id "
        "WHERE e.status = %s AND e.scheduled_at <= %s) ranked "
        "JOIN executions e ON e.id = ranked.pick JOIN jobs j ON j.id = e.job_id "
        "WHERE ranked.app_rank <= %s ORDER BY e.scheduled_at, e.id",
        (aging_ms, ExecutionStatus.SCHEDULED.value, until_ms, per_app),
    )
    return [ExecutionWithJob.from_row(r) for r in rows]


def mark_waiting(conn: Connection, keys: Sequence[int]) -> None:
    """Say on these executions, still SCHEDULED, that they wait for a free slot."""
    if keys:
        driver.execute(
            conn,
            f"UPDATE executions SET message = %s WHERE id IN ({driver.ints(sorted(keys))}) "
            "AND status = %s",
            (SLOT_WAIT, ExecutionStatus.SCHEDULED.value),
        )


def unfinished_on_worker(conn: Connection, worker_id: str, limit: int) -> list[ExecutionWithJob]:
    """Executions committed to one worker's queue that have not ended."""
    rows = driver.fetch(
        conn,
        _WITH_JOB + "WHERE e.worker_id = %s AND e.status = %s LIMIT %s",
        (worker_id, ExecutionStatus.QUEUED.value, limit),
    )
    return [ExecutionWithJob.from_row(r) for r in rows]


def newest_queued_on(conn: Connection, worker_id: str, limit: int) -> list[ExecutionWithJob]:
    """Up to ``limit`` executions QUEUED on one worker, the last sent first: the end of
    its queue, which a recall takes back first."""
    rows = driver.fetch(
        conn,
        _WITH_JOB + "WHERE e.worker_id = %s AND e.status = %s "
        "ORDER BY e.dispatched_at DESC, e.id DESC LIMIT %s",
        (worker_id, ExecutionStatus.QUEUED.value, limit),
    )
    return [ExecutionWithJob.from_row(r) for r in rows]


def overdue(
    conn: Connection, now_ms: int, grace_ms: int, limit: int, after: Page | None = None
) -> list[ExecutionWithJob]:
    """QUEUED executions of jobs with a timeout, dispatched longer ago than it plus grace,
    longest waiting first; with ``after``, only those after that row (the next page).

    A run starts at or after its dispatch: these are the candidates, and the caller
    counts from the start its worker reports (``services/dispatcher/upkeep/timeouts``).
    Candidates not due yet stay: the caller pages through them, so a backlog of those
    never hides the ones behind it.
    """
    page, params = "", tuple[int, ...]()
    if after is not None:
        page = "AND (e.dispatched_at > %s OR (e.dispatched_at = %s AND e.id > %s)) "
        params = (after.since_ms, after.since_ms, after.id)
    rows = driver.fetch(
        conn,
        _WITH_JOB + "WHERE e.status = %s AND e.dispatched_at < %s "
        "AND j.timeout_seconds IS NOT NULL "
        f"AND e.dispatched_at + j.timeout_seconds * 1000 < %s {page}"
        "ORDER BY e.dispatched_at, e.id LIMIT %s",
        (ExecutionStatus.QUEUED.value, now_ms - grace_ms, now_ms - grace_ms, *params, limit),
    )
    return [ExecutionWithJob.from_row(r) for r in rows]


def statuses(conn: Connection, execution_ids: Sequence[str]) -> dict[str, ExecutionStatus]:
    """The status of each of these executions that has a row (one not yet committed, or
    pruned, has none)."""
    if not execution_ids:
        return {}
    marks = ", ".join(["%s"] * len(execution_ids))
    rows = driver.fetch(
        conn,
        f"SELECT execution_id, status FROM executions WHERE execution_id IN ({marks})",
        tuple(execution_ids),
    )
    return {str(r.execution_id): ExecutionStatus(r.status) for r in rows}
