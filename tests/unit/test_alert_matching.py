"""Which events a rule covers, and which failures of a batch count toward a streak."""

from __future__ import annotations

from common.alerts.firing import matches
from common.alerts.kinds import AlertKind
from common.alerts.payload import AlertEvent
from common.alerts.rules import AlertRule
from common.alerts.run_alerts import RunEndFact, failures_that_count
from common.states import ExecutionStatus


def rule(pk: int, kinds: tuple[AlertKind, ...], app_pk: int | None = None) -> AlertRule:
    return AlertRule(pk, f"alr_{pk}", app_pk, None, "https://x", kinds, 1, 600, 0, "t")


def end(job_id: int, status: ExecutionStatus) -> RunEndFact:
    return RunEndFact(job_id, 1, "app_1", f"e{job_id}", 1, status, None, "w1", 0)


def event(kind: AlertKind, app_pk: int | None) -> AlertEvent:
    return AlertEvent(kind, "1", app_pk, 0, "x")


def test_a_rule_covers_its_kinds_of_its_app_and_an_app_less_rule_every_app() -> None:
    on_a = rule(1, (AlertKind.FAILED,), app_pk=1)
    everywhere = rule(2, (AlertKind.FAILED, AlertKind.WORKER_GONE))
    events = [
        event(AlertKind.FAILED, 1),
        event(AlertKind.FAILED, 2),
        event(AlertKind.LOST, 1),
        event(AlertKind.WORKER_GONE, None),
    ]
    found = [(r.rule_pk, e.kind, e.app_pk) for r, e in matches([on_a, everywhere], events)]
    assert found == [
        (1, AlertKind.FAILED, 1),
        (2, AlertKind.FAILED, 1),
        (2, AlertKind.FAILED, 2),
        (2, AlertKind.WORKER_GONE, None),
    ]


def test_only_failures_after_a_job_s_last_success_in_the_batch_count() -> None:
    batch = [
        end(1, ExecutionStatus.FAILED),
        end(2, ExecutionStatus.FAILED),
        end(1, ExecutionStatus.SUCCEEDED),
        end(1, ExecutionStatus.TIMED_OUT),
        end(3, ExecutionStatus.SKIPPED),
        end(2, ExecutionStatus.LOST),
    ]
    failing, succeeded = failures_that_count(batch)
    assert [(f.job_id, f.status) for f in failing] == [
        (2, ExecutionStatus.FAILED),
        (1, ExecutionStatus.TIMED_OUT),
        (2, ExecutionStatus.LOST),
    ]
    assert succeeded == {1}
