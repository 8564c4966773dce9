"""The jobs page (every app's jobs, filtered) and a job's own page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from common.cron_words import describe_schedule
from common.db import control as job_control
from common.db.apps import App
from common.db.deliveries import recent_for_job
from common.db.executions import jobs_with_runs, list_for_job
from common.db.operator_reads import JobQuery, apps_by_key, find_job, find_jobs
from common.db.rows import AnyRow
from common.errors import JobNotFoundError
from common.schedule import Schedule
from common.states import JobStatus
from services.api.console.charts import Mark, timeline
from services.api.console.render import page
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, back_path, console_state
from services.api.views import shown_next_trigger, shown_status

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

PAGE_SIZE = 50
EXECUTIONS_SHOWN = 50
CALLBACKS_SHOWN = 20
NEXT_TRIGGERS = 5
Text = Annotated[str, Query(max_length=200)]


@dataclass(frozen=True)
class JobLine:
    """One job as the console lists it."""

    row: AnyRow
    app: App | None
    status: str
    next_trigger: int | None
    last: AnyRow | None

    @property
    def actions(self) -> list[str]:
        """The actions the job's stored status allows (the rules of services.api.control)."""
        return allowed_actions(str(self.row.status))


def allowed_actions(status: str) -> list[str]:
    """Pause, resume, trigger, cancel: those a job in ``status`` may take."""
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


def _status_filter(text: str) -> JobStatus | None:
    return JobStatus(text) if text in JobStatus.__members__ else None


def _lines(state: Any, query: JobQuery) -> tuple[list[JobLine], bool, dict[int, App]]:
    with state.engine.connect() as conn:
        apps = apps_by_key(conn)
        rows = find_jobs(conn, query)
        shown = rows[: query.limit]
        ids = [int(r.id) for r in shown]
        last = job_control.last_executions(conn, ids)
        running = jobs_with_runs(conn, ids)
    lines = [
        JobLine(
            r,
            apps.get(int(r.app_id)),
            shown_status(r, int(r.id) in running),
            shown_next_trigger(r),
            last.get(int(r.id)),
        )
        for r in shown
    ]
    return lines, len(rows) > query.limit, apps


@router.get("/jobs")
def jobs_page(
    request: Request,
    session: SessionDep,
    app: Text = "",
    status: Text = "",
    handler: Text = "",
    name: Text = "",
    before: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    """Every app's jobs, newest first, narrowed by app, status, handler and name."""
    state = console_state(request)
    with state.engine.connect() as conn:
        app_pk = next((a.id for a in apps_by_key(conn).values() if a.app_id == app), None)
    query = JobQuery(
        app_pk, _status_filter(status), handler or None, name or None, before, PAGE_SIZE
    )
    lines, more, apps = _lines(state, query)
    unknown_app = bool(app) and app_pk is None
    if unknown_app:
        lines, more = [], False  # an app that does not exist has no jobs
    filters = {"app": app, "status": status, "handler": handler, "name": name}
    return page(
        request,
        "jobs.html",
        session=session,
        nav="jobs",
        lines=lines,
        more=more,
        apps=sorted(apps.values(), key=lambda a: a.name),
        filters=filters,
        statuses=[s.value for s in JobStatus],
        back=back_path(request),
        now=state.clock.now_ms(),
        unknown_app=unknown_app,
    )


def _next_triggers(row: AnyRow) -> list[int]:
    start = shown_next_trigger(row)
    if start is None:
        return []
    return Schedule(row.cron_expr, row.timezone, row.fixed_rate_seconds).preview(
        start, NEXT_TRIGGERS
    )


def _marks(executions: list[AnyRow]) -> list[Mark]:
    return [
        Mark(
            int(e.trigger_time),
            str(e.status),
            f"attempt {e.attempt}: {e.status} on {e.worker_id or 'no worker'}",
        )
        for e in executions
    ]


def job_context(state: Any, job_id: int) -> dict[str, Any]:
    """Everything a job's page shows."""
    with state.engine.connect() as conn:
        row = find_job(conn, job_id)
        if row is None:
            raise JobNotFoundError(job_id)
        app = apps_by_key(conn).get(int(row.app_id))
        executions = list_for_job(conn, job_id, EXECUTIONS_SHOWN)
        running = bool(jobs_with_runs(conn, [job_id]))
        callbacks = recent_for_job(conn, job_id, CALLBACKS_SHOWN)
    return {
        "job": row,
        "app": app,
        "job_status": shown_status(row, running),
        "schedule": describe_schedule(row.cron_expr, row.timezone, row.fixed_rate_seconds),
        "next_triggers": _next_triggers(row),
        "executions": executions,
        "timeline": timeline(_marks(list(reversed(executions))), "Executions by trigger time"),
        "callbacks": callbacks,
        "actions": allowed_actions(str(row.status)),
        "now": state.clock.now_ms(),
    }


@router.get("/jobs/{job_id}")
def job_page(job_id: int, request: Request, session: SessionDep) -> Response:
    """One job: its schedule in words and next triggers, its executions, its callbacks."""
    context = job_context(console_state(request), job_id)
    return page(
        request, "job.html", session=session, nav="jobs", back=back_path(request), **context
    )
