"""The jobs page (every app's jobs, filtered) and a job's own page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from common.db.apps import MySqlAppStore
from common.db.job_dependencies import waited_for
from common.db.operator_reads import JobQuery
from common.db.records import ExecutionRecord
from common.operator_roles import EVERY_APP, AppScope
from common.states import JobStatus
from services.api.console.charts import Mark, timeline
from services.api.console.render import PageContext, page
from services.api.console.routing import ConsoleRoute
from services.api.console.session import SessionDep, back_path, console_state
from services.api.operator.jobs import job_detail, job_lines
from services.api.state import ApiState

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

PAGE_SIZE = 50
EXECUTIONS_SHOWN = 50
CALLBACKS_SHOWN = 20
Text = Annotated[str, Query(max_length=200)]


def _status_filter(text: str) -> JobStatus | None:
    return JobStatus(text) if text in JobStatus.__members__ else None


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
    """The jobs of every app the operator reaches, newest first, narrowed by app,
    status, handler and name (another app's id is an app that does not exist)."""
    state = console_state(request)
    scope = session.operator.scope
    with state.engine.connect() as conn:
        apps = MySqlAppStore(conn).apps_by_key(scope)
        app_pk = next((a.id for a in apps.values() if a.app_id == app), None)
        unknown_app = bool(app) and app_pk is None
        narrowing = (_status_filter(status), handler or None, name or None, before, PAGE_SIZE)
        query = JobQuery(app_pk, *narrowing, scope=scope)
        # An app that does not exist has no jobs.
        lines, more = ([], False) if unknown_app else job_lines(conn, query, apps)
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


def _marks(executions: list[ExecutionRecord]) -> list[Mark]:
    return [
        Mark(
            e.trigger_time,
            str(e.status),
            f"attempt {e.attempt}: {e.status} on {e.worker_id or 'no worker'}",
        )
        for e in executions
    ]


def job_context(state: ApiState, job_id: int, scope: AppScope = EVERY_APP) -> PageContext:
    """Everything a job's page shows (``services.api.operator.jobs.job_detail``), for a
    job of an app in ``scope``."""
    detail = job_detail(state, job_id, EXECUTIONS_SHOWN, CALLBACKS_SHOWN, scope)
    return {
        "job": detail.job,
        "app": detail.app,
        "job_status": detail.status,
        "schedule": detail.schedule,
        "next_fires": detail.next_fires,
        "executions": detail.executions,
        "timeline": timeline(
            _marks(list(reversed(detail.executions))), "Executions by trigger time"
        ),
        "callbacks": [(c, detail.attempts_of(c)) for c in detail.callbacks],
        "actions": detail.actions,
        "backfillable": detail.job.schedule.recurring
        and detail.job.status in (JobStatus.WAITING, JobStatus.RUNNING),
        "backfill_max_runs": state.settings.backfill_max_runs,
        "after": detail.after,
        "waited": {e.execution_id: waited_for(e.waited_for) for e in detail.executions},
        "now": state.clock.now_ms(),
    }


@router.get("/jobs/{job_id}")
def job_page(job_id: int, request: Request, session: SessionDep) -> Response:
    """One job: its schedule in words and next triggers, its executions, its callbacks."""
    context = job_context(console_state(request), job_id, session.operator.scope)
    return page(
        request, "job.html", session=session, nav="jobs", back=back_path(request), **context
    )
