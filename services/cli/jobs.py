"""``kairos jobs``: list, show, pause, resume, trigger, backfill and cancel any app's jobs, and
read a job's executions (``services.api.operator.jobs``, as the console does)."""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import TYPE_CHECKING

from common.states import ExecutionStatus, JobStatus
from services.cli.render import (
    Column,
    make_console,
    one_line,
    print_facts,
    print_json,
    print_table,
    seconds_text,
    when_text,
)
from services.cli.types import Subcommands, cli_actor, whole_number

if TYPE_CHECKING:
    from common.db.records import ExecutionRecord, JobRecord
    from common.documents import JsonObject
    from services.api.operator.jobs import JobDetail, JobLine

# Parsing stays light: the stores' drivers and the API's code load only when a
# command runs.
JOB_ACTIONS = ("pause", "resume", "trigger", "cancel")

MAX_LIMIT = 1000


_limit = whole_number(1, MAX_LIMIT)


def _job_id(text: str) -> int:
    """An argparse type: a job id (a positive whole number)."""
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (a positive whole number)")
    return int(text)


def _schedule_text(job: JobRecord) -> str:
    from common.cron.words import every_interval

    if job.cron_expr is not None:
        return job.cron_expr
    if job.fixed_rate_seconds is not None:
        return every_interval(job.fixed_rate_seconds)
    return "once"


def _last_text(last: ExecutionRecord | None, now_ms: int) -> str:
    if last is None:
        return "-"
    moment = last.ended_at or last.started_at or last.trigger_time
    ago = seconds_text(max(0, now_ms - moment) / 1000)
    return f"{last.status} {ago} ago"


def _line_json(line: JobLine) -> JsonObject:
    from services.api.views import job_view

    running = line.status != line.job.status
    view = job_view(line.job, line.last, running).model_dump(mode="json")
    app = line.app
    return {"appId": app.app_id if app else None, "appName": app.name if app else None, **view}


def cmd_jobs_list(args: argparse.Namespace) -> int:
    """List every app's jobs, newest first, by app, status, handler and name."""
    from common.config import ApiSettings
    from common.db.operator_reads import JobQuery
    from services.api.operator.jobs import list_jobs, operator_state

    query = JobQuery(None, args.status, args.handler, args.name, args.before, args.limit)
    with operator_state(ApiSettings()) as state:
        page = list_jobs(state, query, args.app)
        now = state.clock.now_ms()
    if args.output == "json":
        older = page.lines[-1].job.id if page.more else None
        print_json({"jobs": [_line_json(line) for line in page.lines], "nextBefore": older})
        return 0
    rows = [
        [
            str(line.job.id),
            line.app.name if line.app else "?",
            one_line(line.job.job_name, 60),
            line.job.handler,
            line.status,
            str(line.job.priority),
            _schedule_text(line.job),
            when_text(line.next_trigger, now),
            _last_text(line.last, now),
        ]
        for line in page.lines
    ]
    columns = [
        Column("JOB", "id"),
        Column("APP", "text", keep=5),
        Column("NAME", "text", keep=6),
        Column("HANDLER", keep=4),
        Column("STATUS", keep=9),
        Column("PRI", "num", keep=2),
        Column("SCHEDULE", "text", keep=3),
        Column("NEXT", keep=7),
        Column("LAST", keep=5),
    ]
    console = make_console()
    print_table(columns, rows, "no job matches", console)
    if page.more:
        console.print(f"more: --before {page.lines[-1].job.id}", markup=False)
    return 0


def _kind(execution: ExecutionRecord) -> str:
    """What made the run: its job's schedule, a manual trigger or a backfill."""
    if execution.backfill:
        return "backfill"
    return "manual" if execution.manual else "schedule"


def _execution_rows(runs: list[ExecutionRecord], now_ms: int) -> list[list[str]]:
    rows = []
    for e in runs:
        took = "-"
        if e.started_at is not None and e.ended_at is not None:
            took = seconds_text(max(0, e.ended_at - e.started_at) / 1000)
        rows.append(
            [
                e.execution_id,
                when_text(e.trigger_time, now_ms),
                str(e.attempt),
                _kind(e),
                str(e.status),
                e.worker_id or "-",
                took,
                one_line(e.message),
            ]
        )
    return rows


EXECUTION_COLUMNS = (
    Column("EXECUTION", "id"),
    Column("TRIGGER", keep=6),
    Column("TRY", "num", keep=3),
    Column("KIND", keep=4),
    Column("STATUS", keep=9),
    Column("WORKER", keep=5),
    Column("TOOK", "num", keep=4),
    Column("MESSAGE", "text", keep=2),
)


def _detail_json(detail: JobDetail) -> JsonObject:
    from common.timefmt import iso_ms
    from services.api.callback_reads import delivery_view
    from services.api.views import execution_view, job_view

    last = detail.executions[0] if detail.executions else None
    running = detail.status != detail.job.status
    view = job_view(detail.job, last, running, after=detail.after).model_dump(mode="json")
    return {
        "appId": detail.app.app_id if detail.app else None,
        "appName": detail.app.name if detail.app else None,
        **view,
        "schedule": detail.schedule,
        "nextTriggerTimes": [iso_ms(t) for t in detail.next_triggers],
        "nextFireTimes": [iso_ms(f) for _, f in detail.next_fires],
        "actions": detail.actions,
        "executions": [execution_view(e).model_dump(mode="json") for e in detail.executions],
        "callbacks": [
            {
                **delivery_view(c, detail.attempts_of(c)).model_dump(mode="json"),
                "url": c.url,
            }
            for c in detail.callbacks
        ],
    }


def _facts(detail: JobDetail, now: int) -> list[tuple[str, str]]:
    job = detail.job
    schedule = detail.schedule + (f"  [{job.cron_expr}]" if job.cron_expr else "")
    upcoming = [
        when_text(t, now) + (f"  (fires {when_text(f, now)})" if f != t else "")
        for t, f in detail.next_fires
    ]
    retries = f"{job.max_retries} (backoff {job.retry_backoff_seconds}s to "
    retries += f"{job.retry_backoff_max_seconds}s)"
    app = f"{detail.app.name} ({detail.app.app_id})" if detail.app else "?"
    return [
        ("job", f"{job.id} {job.job_name}"),
        ("app", app),
        ("handler", job.handler),
        ("status", detail.status),
        ("priority", f"{job.priority} (0-9, higher runs first among the app's waiting runs)"),
        ("schedule", schedule),
        ("next", "\n".join(upcoming) or "none: it does not fire again by schedule"),
        ("misfire", f"{job.misfire_policy} (after {job.misfire_threshold_seconds}s)"),
        ("overlap", str(job.overlap_policy)),
        ("retries", retries),
        ("timeout", f"{job.timeout_seconds}s" if job.timeout_seconds else "none"),
        ("jitter", f"up to {job.jitter_seconds}s" if job.jitter_seconds else "none"),
        ("callback", job.callback_url or "none"),
        ("trace", job.traceparent or "none"),
        ("after", _after_text(detail)),
        ("created", when_text(job.created_at, now)),
        ("actions", ", ".join(detail.actions) or "none"),
    ]


def _after_text(detail: JobDetail) -> str:
    """The job's parents, and the parent runs its newest run waited for."""
    if not detail.after:
        return "none: its runs wait for no other job"
    text = ", ".join(f"job {a.job_id} ({a.on})" for a in detail.after)
    last = detail.executions[0] if detail.executions else None
    if last is not None and last.waited_for:
        from common.db.job_dependencies import waited_for

        runs = waited_for(last.waited_for) or []
        text += "\nlast run waited for " + ", ".join(
            f"job {r['jobId']} run {r['executionId']} {r['status']}" for r in runs
        )
    return text


def cmd_jobs_show(args: argparse.Namespace) -> int:
    """One job: its schedule in words and next triggers, its executions, its callbacks."""
    from common.config import ApiSettings
    from services.api.operator.jobs import job_detail, operator_state

    with operator_state(ApiSettings()) as state:
        detail = job_detail(state, args.job_id, args.executions, args.callbacks)
        now = state.clock.now_ms()
    if args.output == "json":
        print_json(_detail_json(detail))
        return 0
    console = make_console()
    print_facts(_facts(detail, now), console)
    console.print(f"\nexecutions (newest first, at most {args.executions}):", markup=False)
    print_table(EXECUTION_COLUMNS, _execution_rows(detail.executions, now), "none yet", console)
    console.print("\ncallbacks (newest first):", markup=False)
    empty = "none" if detail.job.callback_url else "none: the job has no callback URL"
    print_table(CALLBACK_COLUMNS, _callback_rows(detail, now), empty, console)
    return 0


CALLBACK_COLUMNS = (
    Column("EXECUTION", "id"),
    Column("STATUS", keep=9),
    Column("POSTS", "num", keep=5),
    Column("NEXT", keep=6),
    Column("ANSWER", "num", keep=4),
    Column("LAST ERROR", "text", keep=3),
)


def _callback_rows(detail: JobDetail, now: int) -> list[list[str]]:
    """The job's callbacks: ``NEXT`` says when a RETRYING one is tried again, as the
    console does."""
    rows = []
    for c in detail.callbacks:
        retrying = str(c.status) == "RETRYING" and c.next_attempt_at is not None
        rows.append(
            [
                str(c.execution_id),
                str(c.status),
                str(c.attempts),
                when_text(c.next_attempt_at, now) if retrying else "-",
                str(c.last_status_code or "-"),
                one_line(c.last_error),
            ]
        )
    return rows


def cmd_jobs_executions(args: argparse.Namespace) -> int:
    """A job's executions, newest first."""
    from common.config import ApiSettings
    from services.api.operator.jobs import job_executions, operator_state
    from services.api.views import execution_view

    with operator_state(ApiSettings()) as state:
        runs = job_executions(state, args.job_id, args.limit, args.status)
        now = state.clock.now_ms()
    if args.output == "json":
        executions = [execution_view(e).model_dump(mode="json") for e in runs]
        print_json({"jobId": args.job_id, "executions": executions})
        return 0
    print_table(EXECUTION_COLUMNS, _execution_rows(runs, now), "no execution matches")
    return 0


def _params_object(text: str) -> JsonObject:
    """An argparse type: a JSON object (the params of one triggered run)."""
    import json

    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--params is not JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--params must be a JSON object, e.g. '{\"day\": 1}'")
    return value


def cmd_jobs_act(args: argparse.Namespace) -> int:
    """Pause, resume, trigger or cancel one job, as its app's own call would; a trigger
    with ``--params`` gives that run its own params."""
    from common.config import ApiSettings
    from services.api.operator.jobs import act_on_job, operator_state
    from services.api.schemas import TriggerRequest

    params = getattr(args, "params", None)
    body = None if params is None else TriggerRequest(params=params)
    with operator_state(ApiSettings()) as state:
        done = act_on_job(state, args.job_id, args.jobs_cmd, cli_actor(), body)
    print(done)
    return 0


def cmd_jobs_backfill(args: argparse.Namespace) -> int:
    """Run a recurring job's past trigger times in [--from, --to) that have none."""
    from common.config import ApiSettings
    from services.api.operator.jobs import backfill_any_job, operator_state
    from services.api.schemas import BackfillRequest

    body = BackfillRequest.model_validate({"from": args.start, "to": args.end})
    with operator_state(ApiSettings()) as state:
        done = backfill_any_job(state, args.job_id, body, cli_actor())
    if args.output == "json":
        print_json(done.model_dump(mode="json", by_alias=True))
        return 0
    left = f"; {done.leftToSchedule} left to its schedule" if done.leftToSchedule else ""
    print(
        f"Job {done.jobId} backfilled from {done.from_} to {done.to}: {done.created} runs "
        f"created, {done.existing} times had run already{left}."
    )
    return 0


def _time_argument(text: str) -> str | int:
    """An argparse type: epoch ms (digits) or ISO 8601 text, as the API takes them."""
    return int(text) if text.isascii() and text.isdigit() else text


def _add_backfill_parser(jobs: Subcommands) -> None:
    backfill = jobs.add_parser(
        "backfill",
        help="run a cron or fixed-rate job's past trigger times in [--from, --to) that "
        "have no execution yet (marked backfill; a repeat runs nothing more)",
    )
    backfill.add_argument("job_id", type=_job_id)
    backfill.add_argument(
        "--from",
        dest="start",
        required=True,
        type=_time_argument,
        help="first time included: ISO 8601 (no offset: a wall time in the job's zone) or epoch ms",
    )
    backfill.add_argument(
        "--to",
        dest="end",
        required=True,
        type=_time_argument,
        help="end of the range, not included (later than now counts as now)",
    )
    _add_output(backfill)
    backfill.set_defaults(func=cmd_jobs_backfill)


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="default table"
    )


_ACTION_HELP = MappingProxyType(
    {
        "pause": "stop claiming the job's triggers (a WAITING or RUNNING job)",
        "resume": (
            "claim a PAUSED job's triggers again; those that fell inside the pause are skipped"
        ),
        "trigger": "run the job now, besides its schedule (a manual execution)",
        "cancel": "end the job; its scheduled runs become CANCELLED, running ones finish",
    }
)


def add_jobs_parser(sub: Subcommands) -> None:
    """``kairos jobs ...``."""
    jobs = sub.add_parser(
        "jobs",
        help="every app's jobs: list, show, executions; pause, resume, trigger, backfill, cancel",
    ).add_subparsers(dest="jobs_cmd", required=True)
    listing = jobs.add_parser("list", help="jobs, newest first, by app, status, handler, name")
    listing.add_argument("--app", help="an app id, or an app's name")
    listing.add_argument("--status", choices=[s.value for s in JobStatus])
    listing.add_argument("--handler", help="handler name (exact)")
    listing.add_argument("--name", help="job name prefix")
    listing.add_argument("--limit", type=_limit, default=50, help="default 50, at most 1000")
    listing.add_argument("--before", type=_job_id, help="only jobs older than this job id")
    _add_output(listing)
    listing.set_defaults(func=cmd_jobs_list)
    show = jobs.add_parser("show", help="one job: schedule, next triggers, executions, callbacks")
    show.add_argument("job_id", type=_job_id)
    show.add_argument("--executions", type=_limit, default=10, help="how many (default 10)")
    show.add_argument("--callbacks", type=_limit, default=10, help="how many (default 10)")
    _add_output(show)
    show.set_defaults(func=cmd_jobs_show)
    runs = jobs.add_parser("executions", help="a job's executions, newest first")
    runs.add_argument("job_id", type=_job_id)
    runs.add_argument("--status", choices=[s.value for s in ExecutionStatus])
    runs.add_argument("--limit", type=_limit, default=50, help="default 50, at most 1000")
    _add_output(runs)
    runs.set_defaults(func=cmd_jobs_executions)
    for action in JOB_ACTIONS:
        acting = jobs.add_parser(action, help=_ACTION_HELP[action])
        acting.add_argument("job_id", type=_job_id)
        if action == "trigger":
            acting.add_argument(
                "--params",
                type=_params_object,
                metavar="JSON",
                help="params for this run only, in place of the job's (a JSON object)",
            )
        acting.set_defaults(func=cmd_jobs_act)
    _add_backfill_parser(jobs)
