"""A backfill: run a recurring job's past trigger times that have no execution yet.

The runs are manual runs (they never hold the job or wait for its overlap policy),
marked ``backfill``, SCHEDULED to run now: the dispatcher fires them as any other
waiting run, so the app's fair share of slots paces them and other apps' runs are not
held up. Nothing is published from here. The job row lock orders a backfill with
cancel, pause, edits and the claim of the job's next trigger; the execution ids derived
from each trigger time make a repeat, or a concurrent overlapping backfill, create
each time once.

Each run an app's call creates counts one request against the app's rate limit, charged
before any is written (``RowCharge``): a call in a loop cannot queue runs faster than
the app may make requests. The runs are counted and paid for before the job row is
locked: the charge is a Redis call, and a slow Redis must not hold a MySQL row lock.

Allowed for a WAITING or RUNNING job; a PAUSED, CANCELLED or finished one is refused
(409), so a job someone stopped never starts running old times; a one-shot job has no
series to backfill (422).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from common.backfill import BackfillPlan, plan_backfill
from common.db import job_control as db
from common.db.apps import App
from common.db.audit import AuditEntry, record_audit
from common.db.backfill import BackfillCount, insert_backfill, missing_backfill_runs
from common.db.jobs import get_job
from common.db.records import JobRecord
from common.db.retry import retry_conflicts
from common.states import JobStatus
from common.timefmt import iso_ms
from services.api.job_control import STAGE, Rule, applies, check_may_run, status_of
from services.api.schemas import BackfillAccepted, BackfillRequest
from services.api.state import ApiState
from services.api.validation import parse_time_field
from services.api.wake import wake_dispatcher

log = logging.getLogger(__name__)

BACKFILL = Rule("backfill", (JobStatus.WAITING, JobStatus.RUNNING))


@dataclass(frozen=True)
class _Done:
    """A committed backfill: the range it covered and what it did."""

    from_ms: int
    to_ms: int
    count: BackfillCount
    left_to_schedule: int


@dataclass(frozen=True)
class _Ask:
    """One backfill call: which job of which app, its range, the clock and the bound."""

    app: App
    job_id: int
    body: BackfillRequest
    now: int
    limit: int


def _plan(ask: _Ask, job: JobRecord | None) -> tuple[JobRecord, int, int, BackfillPlan]:
    """The job as checked for a backfill, its range and the plan of its trigger times."""
    applies(BACKFILL, ask.job_id, status_of(job))
    assert job is not None
    check_may_run(ask.app, job, "backfilled")
    zone = job.schedule.timezone
    from_ms = parse_time_field(ask.body.from_, zone, "from")
    to_ms = parse_time_field(ask.body.to, zone, "to")
    plan = plan_backfill(job.schedule, job.next_trigger_time, from_ms, to_ms, ask.now, ask.limit)
    return job, from_ms, to_ms, plan


def _missing_count(engine: Engine, ask: _Ask) -> int:
    """How many runs the backfill would create, read without locking anything."""
    with engine.connect() as conn:
        job, _, _, plan = _plan(ask, get_job(conn, ask.app.id, ask.job_id))
        return len(missing_backfill_runs(conn, job, plan.times, ask.now))


class _UnpaidError(Exception):
    """The locked job has more runs to create (``rows``) than were paid for."""

    def __init__(self, rows: int) -> None:
        super().__init__(f"{rows} runs to create, more than were paid for")
        self.rows = rows


@retry_conflicts(STAGE)
def _write(engine: Engine, ask: _Ask, paid: int | None) -> _Done:
    """Lock the job and create its missing runs, at most ``paid`` of them (None: no
    bound); raises ``_UnpaidError``, writing nothing, when there are more."""

    def within_paid(rows: int) -> None:
        if paid is not None and rows > paid:
            raise _UnpaidError(rows)

    app, job_id = ask.app, ask.job_id
    with engine.begin() as conn:
        job, from_ms, to_ms, plan = _plan(ask, db.lock_job(conn, app.id, job_id))
        count = insert_backfill(conn, job, plan.times, ask.now, within_paid)
        after = {"from": iso_ms(from_ms), "to": iso_ms(to_ms), "created": count.created}
        entry = AuditEntry(app.who, "job.backfill", "job", str(job_id), app.id, None, after)
        record_audit(conn, [entry], ask.now)
        return _Done(from_ms, min(to_ms, ask.now), count, plan.left_to_schedule)


def _backfill(engine: Engine, ask: _Ask, charge: Callable[[int], None] | None) -> _Done:
    """Count the runs to create, pay for them, then lock the job and create them.

    The rate limit (a Redis call) is paid before the job row is locked, so a slow Redis
    never holds the lock. When the count changed in between: fewer runs to create
    (another backfill, or the schedule, made some) keep what was paid, a small
    over-charge with no refund; more (the job's schedule was changed) roll back, are
    paid, and are written again. Each round pays more than the last, and at most the
    backfill bound, so it ends.
    """
    if charge is None:
        return _write(engine, ask, None)
    paid = _missing_count(engine, ask)
    while True:
        charge(paid)
        try:
            return _write(engine, ask, paid)
        except _UnpaidError as e:
            paid = e.rows


def backfill_job(
    state: ApiState,
    app: App,
    job_id: int,
    body: BackfillRequest,
    charge: Callable[[int], None] | None = None,
) -> BackfillAccepted:
    """Create the runs of the job's trigger times in ``[from, to)`` (``to`` cut at now,
    and before the job's next trigger time) that have no execution yet, and wake the
    dispatcher; say how many were created and how many existed.

    ``charge`` (the app's own call, a ``RowCharge``) is paid the runs to be created
    before the job is locked and any is written (a repeat that creates none costs the
    request alone); with too few tokens left, ``RateLimitedError`` and nothing written.
    An operator's backfill pays none."""
    now = state.clock.now_ms()
    ask = _Ask(app, job_id, body, now, state.settings.backfill_max_runs)
    done = _backfill(state.engine, ask, charge)
    if done.count.created:
        wake_dispatcher(state, now, now)
    log.info(
        "job backfilled: %d runs created, %d existed",
        done.count.created,
        done.count.existing,
        extra={"job_id": job_id},
    )
    return BackfillAccepted.model_validate(
        {
            "jobId": job_id,
            "from": iso_ms(done.from_ms),
            "to": iso_ms(done.to_ms),
            "created": done.count.created,
            "existing": done.count.existing,
            "leftToSchedule": done.left_to_schedule,
        }
    )
