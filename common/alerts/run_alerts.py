"""Alerts on runs' ends, as the results consumer records them: a run that ended
FAILED, LOST or TIMED_OUT (no retry left), and a job's failures in a row (a rule's
streak; a success starts it again). A batch with nothing a rule covers costs nothing:
no query, no state."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.alerts import state_rows
from common.alerts.firing import RUN_KIND_SET, fire_events
from common.alerts.kinds import RUN_KINDS
from common.alerts.payload import AlertEvent
from common.alerts.rules import AlertRule
from common.db.deliveries import UNLABELLED, JobLabel, NewDelivery, job_labels
from common.documents import JsonObject
from common.states import ExecutionStatus
from common.timefmt import iso_ms

MESSAGE_CHARS = 500


@dataclass(frozen=True, slots=True)
class RunEndFact:
    """One trigger's last attempt, as recorded: what an alert on it tells."""

    job_id: int
    app_pk: int
    app_id: str
    execution_id: str
    attempt: int
    status: ExecutionStatus
    message: str | None
    worker_id: str
    ended_at: int


def _run_rules(rules: Sequence[AlertRule]) -> list[AlertRule]:
    return [r for r in rules if RUN_KIND_SET.intersection(r.kinds)]


def failures_that_count(ends: Sequence[RunEndFact]) -> tuple[list[RunEndFact], set[int]]:
    """The failing ends that count (those after their job's last success in the batch,
    in order) and the jobs with a success in the batch (their streaks start again)."""
    succeeded: set[int] = set()
    failing: list[RunEndFact] = []
    for end in ends:
        if end.status is ExecutionStatus.SUCCEEDED:
            succeeded.add(end.job_id)
            failing = [f for f in failing if f.job_id != end.job_id]
        elif end.status in RUN_KINDS:
            failing.append(end)
    return failing, succeeded


def run_event(end: RunEndFact, label: JobLabel) -> AlertEvent:
    """The event of one failing run end."""
    kind = RUN_KINDS[end.status]
    name = f' "{label.job_name}"' if label.job_name else ""
    said = f": {end.message[:MESSAGE_CHARS]}" if end.message else ""
    headline = (
        f"run {end.execution_id} of job {end.job_id}{name} (app {end.app_id}) "
        f"ended {end.status} on attempt {end.attempt}{said}"
    )
    facts: JsonObject = {
        "jobId": end.job_id,
        "jobName": label.job_name,
        "app": end.app_id,
        "executionId": end.execution_id,
        "attempt": end.attempt,
        "status": end.status.value,
        "message": end.message[:MESSAGE_CHARS] if end.message else None,
        "workerId": end.worker_id,
        "endedAt": iso_ms(end.ended_at),
    }
    return AlertEvent(kind, str(end.job_id), end.app_pk, end.ended_at, headline, facts)


def record_run_alerts(
    conn: Connection, rules: Sequence[AlertRule], ends: Sequence[RunEndFact], now_ms: int
) -> list[NewDelivery]:
    """Fire the rules on these trigger ends in the caller's transaction; the alert
    deliveries recorded. Returns at once, with no query, when no rule covers them."""
    run_rules = _run_rules(rules)
    if not run_rules:
        return []
    failing, succeeded = failures_that_count(ends)
    streak_rules = [r.rule_pk for r in run_rules if r.streak > 1]
    if succeeded and streak_rules:
        state_rows.reset_streaks(conn, streak_rules, succeeded, now_ms)
    covered = [
        f for f in failing if any(r.covers(RUN_KINDS[f.status], f.app_pk) for r in run_rules)
    ]
    if not covered:
        return []
    labels = job_labels(conn, [f.job_id for f in covered])
    events = [run_event(f, labels.get(f.job_id, UNLABELLED)) for f in covered]
    return fire_events(conn, run_rules, events, now_ms)
