"""Jobs as operators see them, across every app: a filtered list, one job in full, its
executions, and pause, resume, trigger, backfill and cancel applied by the rules the job's app's
own calls follow (``services.api.job_control``).

``kairos jobs`` and the console read and act through here, so both show the same
figures and refuse the same things.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

import redis
from sqlalchemy.engine import Connection

from common.clock import ClusterClock
from common.config import ApiSettings
from common.cron.words import describe_schedule
from common.db import job_control
from common.db.apps import App, MySqlAppStore
from common.db.deliveries import AttemptRecord, DeliveryRecord
from common.db.delivery_store import MySqlDeliveryStore
from common.db.engine import make_engine
from common.db.executions import jobs_with_runs, list_for_job
from common.db.job_dependencies import After, parents_of_jobs
from common.db.operator_reads import (
    JobQuery,
    executions_of_job,
    find_job,
    find_jobs,
)
from common.db.records import ExecutionRecord, JobRecord
from common.errors import AmbiguousAppError, AppDisabledError, JobNotFoundError, UnknownAppError
from common.jitter import jittered_ms
from common.keys import RedisKeys
from common.operator_roles import EVERY_APP, AppScope
from common.states import JobStatus
from services.api import backfill, trigger
from services.api import job_control as api_control
from services.api.schemas import BackfillAccepted, BackfillRequest, TriggerRequest
from services.api.state import ApiState
from services.api.views import shown_next_trigger, shown_status

log = logging.getLogger(__name__)

NEXT_TRIGGERS = 5
JOB_ACTIONS = ("pause", "resume", "trigger", "cancel")


@contextmanager
def operator_state(settings: ApiSettings) -> Iterator[ApiState]:
    """Short-lived stores for one operator command, shaped as the API's own state so
    the job control of ``services.api.job_control`` runs unchanged."""
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=10)
    engine = make_engine(settings, pool_size=1)
    try:
        yield ApiState(
            settings=settings,
            engine=engine,
            redis=client,
            clock=ClusterClock(client),
            keys=RedisKeys(settings.namespace),
        )
    finally:
        engine.dispose()
        client.close()


def allowed_actions(status: JobStatus) -> list[str]:
    """Pause, resume, trigger, cancel: those a job in stored ``status`` may take."""
    found = []
    if status in (JobStatus.WAITING, JobStatus.RUNNING):
        found.append("pause")
    if status == JobStatus.PAUSED:
        found.append("resume")
    if status != JobStatus.CANCELLED:
        found.append("trigger")
    if status in job_control.ACTIVE:
        found.append("cancel")
    return found


@dataclass(frozen=True)
class JobLine:
    """One job as an operator lists it: the stored job, its app, the status a client
    sees, its next trigger (None: it does not fire again by schedule) and its newest
    execution."""

    job: JobRecord
    app: App | None
    status: str
    next_trigger: int | None
    last: ExecutionRecord | None

    @property
    def actions(self) -> list[str]:
        """The actions the job's stored status allows."""
        return allowed_actions(self.job.status)


@dataclass(frozen=True)
class JobPage:
    """One page of jobs, newest first; ``more`` when an older page follows."""

    lines: list[JobLine]
    more: bool
    apps: dict[int, App]


def find_app(apps: dict[int, App], wanted: str) -> App:
    """The app whose id, or else whose name, is ``wanted``. Raises ``UnknownAppError``,
    and ``AmbiguousAppError`` when several apps share that name."""
    by_id = [a for a in apps.values() if a.app_id == wanted]
    if by_id:
        return by_id[0]
    by_name = [a for a in apps.values() if a.name == wanted]
    if len(by_name) > 1:
        raise AmbiguousAppError(wanted, [a.app_id for a in by_name])
    if not by_name:
        raise UnknownAppError(wanted)
    return by_name[0]


def job_lines(
    conn: Connection, query: JobQuery, apps: dict[int, App]
) -> tuple[list[JobLine], bool]:
    """The jobs ``query`` finds, with their newest execution, and whether more follow."""
    found = find_jobs(conn, query)
    shown = found[: query.limit]
    ids = [job.id for job in shown]
    last = job_control.last_executions(conn, ids)
    running = jobs_with_runs(conn, ids)
    lines = [
        JobLine(
            job,
            apps.get(job.app_pk),
            shown_status(job, job.id in running),
            shown_next_trigger(job),
            last.get(job.id),
        )
        for job in shown
    ]
    return lines, len(found) > query.limit


def list_jobs(state: ApiState, query: JobQuery, app: str | None = None) -> JobPage:
    """Every app's live jobs matching ``query``, newest first; ``app`` (an app id or a
    unique name) narrows them to one app's. Raises ``UnknownAppError``."""
    with state.engine.connect() as conn:
        apps = MySqlAppStore(conn).apps_by_key()
        if app is not None:
            query = dataclasses.replace(query, app_pk=find_app(apps, app).id)
        lines, more = job_lines(conn, query, apps)
    return JobPage(lines, more, apps)


def next_triggers(job: JobRecord, count: int = NEXT_TRIGGERS) -> list[int]:
    """The job's next ``count`` trigger times by its schedule (none once it is done)."""
    start = shown_next_trigger(job)
    if start is None:
        return []
    return job.schedule.preview(start, count)


@dataclass(frozen=True)
class JobDetail:
    """One job in full: when it runs next, where and how it ran, whether its callbacks
    arrived."""

    job: JobRecord
    app: App | None
    status: str
    schedule: str
    next_triggers: list[int]
    executions: list[ExecutionRecord]
    callbacks: list[DeliveryRecord]
    # Each shown callback's attempts, oldest first, by its delivery row id.
    callback_attempts: dict[int, list[AttemptRecord]]
    # The jobs whose runs this job's runs wait for.
    after: list[After] = field(default_factory=list)

    def attempts_of(self, delivery: DeliveryRecord) -> list[AttemptRecord]:
        """The attempts of one of the shown callbacks, oldest first."""
        return self.callback_attempts.get(delivery.delivery_pk, [])

    @property
    def next_fires(self) -> list[tuple[int, int]]:
        """Each of ``next_triggers`` with the time it fires, its jitter added."""
        job = self.job
        return [(t, jittered_ms(job.id, t, job.jitter_seconds)) for t in self.next_triggers]

    @property
    def actions(self) -> list[str]:
        """The actions the job's stored status allows."""
        return allowed_actions(self.job.status)


def job_detail(
    state: ApiState, job_id: int, executions: int, callbacks: int, scope: AppScope = EVERY_APP
) -> JobDetail:
    """A job of an app in ``scope`` with its newest ``executions`` and ``callbacks``.
    Raises ``JobNotFoundError``."""
    with state.engine.connect() as conn:
        job = find_job(conn, job_id, scope)
        if job is None:
            raise JobNotFoundError(job_id)
        app = MySqlAppStore(conn).apps_by_key().get(job.app_pk)
        runs = list_for_job(conn, job_id, executions)
        running = bool(jobs_with_runs(conn, [job_id]))
        sent_store = MySqlDeliveryStore(conn)
        sent = sent_store.page_for_job(job_id, None, callbacks)
        tried = sent_store.attempts_of([d.delivery_pk for d in sent])
        after = parents_of_jobs(conn, [(job.id, job.has_dependencies)]).get(job.id, [])
    return JobDetail(
        job,
        app,
        shown_status(job, running),
        describe_schedule(job.cron_expr, job.timezone, job.fixed_rate_seconds),
        next_triggers(job),
        runs,
        sent,
        tried,
        after,
    )


def job_executions(
    state: ApiState, job_id: int, limit: int, status: str | None = None
) -> list[ExecutionRecord]:
    """A job's newest executions (only those in ``status`` when given), newest first.
    Raises ``JobNotFoundError``."""
    with state.engine.connect() as conn:
        if find_job(conn, job_id) is None:
            raise JobNotFoundError(job_id)
        return executions_of_job(conn, job_id, limit, status)


def _pause(state: ApiState, app: App, job_id: int) -> str:
    api_control.pause_job(state, app, job_id)
    return f"Job {job_id} paused."


def _resume(state: ApiState, app: App, job_id: int) -> str:
    api_control.resume_job(state, app, job_id)
    return f"Job {job_id} resumed."


def _trigger(state: ApiState, app: App, job_id: int, body: TriggerRequest | None = None) -> str:
    answer, _ = trigger.trigger_job(state, app, job_id, body=body)
    execution_id = json.loads(answer.response)["executionId"]
    own = " with its own params" if body is not None and body.params is not None else ""
    return f"Job {job_id} triggered{own}: execution {execution_id}."


def _cancel(state: ApiState, app: App, job_id: int) -> str:
    api_control.cancel_job(state, app, job_id)
    return f"Job {job_id} cancelled."


ACTIONS: Mapping[str, Callable[[ApiState, App, int], str]] = MappingProxyType(
    {
        "pause": _pause,
        "resume": _resume,
        "trigger": _trigger,
        "cancel": _cancel,
    }
)


# The actions that would start runs of a job: refused for a disabled app.
STARTING_ACTIONS = frozenset({"resume", "trigger"})


def _job_and_app(
    state: ApiState, job_id: int, starts_runs: bool, scope: AppScope, operator: str
) -> App:
    """The app of a job of an app in ``scope``, acting as ``operator`` (whom the audit
    trail names); raises ``JobNotFoundError`` for no such job (or another app's), and
    ``AppDisabledError`` for an action that would start runs (``starts_runs``) of a
    disabled app's job."""
    with state.engine.connect() as conn:
        job = find_job(conn, job_id, scope)
        app = MySqlAppStore(conn).apps_by_key().get(job.app_pk) if job is not None else None
    if job is None or app is None:
        raise JobNotFoundError(job_id)
    if app.disabled and starts_runs:
        # A disabled app runs nothing new, whoever asks; it may still be paused or
        # cancelled, so an operator can stop what it has.
        raise AppDisabledError(app.app_id)
    return dataclasses.replace(app, actor=operator)


def act_on_job(
    state: ApiState,
    job_id: int,
    action: str,
    operator: str,
    trigger_body: TriggerRequest | None = None,
    scope: AppScope = EVERY_APP,
) -> str:
    """Apply ``action`` to a job of an app in ``scope``, by the rules its app's calls
    follow; return what was done (``trigger_body``: a trigger's params for that run).
    Raises what the OpenAPI answers as 404, 403, 409 or 422."""
    app = _job_and_app(state, job_id, action in STARTING_ACTIONS, scope, operator)
    if action == "trigger":
        done = _trigger(state, app, job_id, trigger_body)
    else:
        done = ACTIONS[action](state, app, job_id)
    log.info("operator %s: %s", operator, done, extra={"job_id": job_id})
    return done


def backfill_any_job(
    state: ApiState,
    job_id: int,
    body: BackfillRequest,
    operator: str,
    scope: AppScope = EVERY_APP,
) -> BackfillAccepted:
    """Backfill a job of an app in ``scope`` by the rules its app's call follows
    (``services.api.backfill``). Raises what the OpenAPI answers as 404, 403, 409, 422."""
    app = _job_and_app(state, job_id, True, scope, operator)
    done = backfill.backfill_job(state, app, job_id, body)
    log.info(
        "operator %s: job %d backfilled from %s to %s: %d runs created, %d existed",
        operator,
        job_id,
        done.from_,
        done.to,
        done.created,
        done.existing,
        extra={"job_id": job_id},
    )
    return done
