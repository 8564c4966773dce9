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
the app may make requests.

Allowed for a WAITING or RUNNING job; a PAUSED, CANCELLED or finished one is refused
(409), so a job someone stopped never starts running old times; a one-shot job has no
series to backfill (422).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from common.backfill import plan_backfill
from common.db import job_control as db
from common.db.apps import App
from common.db.audit import AuditEntry, record_audit
from common.db.backfill import BackfillCount, insert_backfill
from common.db.retry import retry_conflicts
from common.states import JobStatus
from common.timefmt import iso_ms
from services.api.job_control import STAGE, Rule, applies, check_may_run, status_of
from services.api.rate_limit import RowCharge
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


@retry_conflicts(STAGE)
def _backfill(
    engine: Engine,
    app: App,
    job_id: int,
    body: BackfillRequest,
    now: int,
    limit: int,
    charge: RowCharge | None,
) -> _Done:
    with engine.begin() as conn:
        job = db.lock_job(conn, app.id, job_id)
        applies(BACKFILL, job_id, status_of(job))
        assert job is not None
        check_may_run(app, job, "backfilled")
        zone = job.schedule.timezone
        from_ms = parse_time_field(body.from_, zone, "from")
        to_ms = parse_time_field(body.to, zone, "to")
        plan = plan_backfill(job.schedule, job.next_trigger_time, from_ms, to_ms, now, limit)
        count = insert_backfill(conn, job, plan.times, now, charge)
        after = {"from": iso_ms(from_ms), "to": iso_ms(to_ms), "created": count.created}
        entry = AuditEntry(app.who, "job.backfill", "job", str(job_id), app.id, None, after)
        record_audit(conn, [entry], now)
        return _Done(from_ms, min(to_ms, now), count, plan.left_to_schedule)


def backfill_job(
    state: ApiState,
    app: App,
    job_id: int,
    body: BackfillRequest,
    charge: RowCharge | None = None,
) -> BackfillAccepted:
    """Create the runs of the job's trigger times in ``[from, to)`` (``to`` cut at now,
    and before the job's next trigger time) that have no execution yet, and wake the
    dispatcher; say how many were created and how many existed.

    ``charge`` (the app's own call) is paid the runs to be created before any is
    written (a repeat that creates none costs the request alone); with too few tokens
    left, ``RateLimitedError`` and nothing written. An operator's backfill pays none."""
    now = state.clock.now_ms()
    limit = state.settings.backfill_max_runs
    done = _backfill(state.engine, app, job_id, body, now, limit, charge)
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
