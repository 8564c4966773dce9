"""Recording outcomes, on the in-memory store: job ends, retries, callbacks, exactly once.

The same paths run on MySQL in tests/integration/test_results.py; ``MemoryStore`` is
held to MySQL's behaviour by tests/contracts/outcome_store.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from common.db.executions import NewExecution
from common.db.job_dependencies import After
from common.dependencies import DependOn
from common.memory.rows import MemoryJob
from common.memory.store import MemoryStore
from common.messages import ExecutionResult
from common.states import ExecutionStatus, JobStatus, ReportedStatus
from services.dispatcher.outcomes.recording import _record_in
from tests.unit.record_books import books_problems

NOW = 100_000
HOOK = "http://hooks.example.com/k"
SUCCEEDED: Final = ExecutionStatus.SUCCEEDED
FAILED: Final = ExecutionStatus.FAILED


@dataclass
class FixedClock:
    """The cluster time, as the test sets it."""

    now: int = NOW

    def now_ms(self) -> int:
        return self.now


def queued(
    store: MemoryStore, job_id: int, execution_id: str, attempt: int = 1, manual: bool = False
) -> int:
    """A QUEUED execution of trigger 1000 on w1; its key."""
    new = NewExecution(execution_id, job_id, attempt, 1_000, 1_000, manual=manual)
    row = new.queued_on("w1")
    store.insert_executions([row], 1_000)
    return store.execution(execution_id).id


def result(
    execution_id: str, job_id: int, status: ReportedStatus = SUCCEEDED, ref: int | None = None
) -> ExecutionResult:
    return ExecutionResult(
        execution_id=execution_id,
        job_id=job_id,
        worker_id="w1",
        status=status,
        message=None if status is SUCCEEDED else "boom",
        result='{"rows":3}' if status is SUCCEEDED else None,
        started_at=2_000,
        ended_at=2_500,
        ref=ref,
    )


def record(store: MemoryStore, *results: ExecutionResult) -> list[str]:
    """Record ``results``; the execution ids of the deliveries it created. The books
    must add up after."""
    finished, deliveries = _record_in(store, FixedClock(), results)
    assert len(finished) <= len(results)
    assert books_problems(store, results) == []
    return [d.execution_id for d in deliveries if d.execution_id is not None]


def test_a_success_ends_a_one_shot_job_and_records_its_callback() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(app_pk=3, job_name="report", callback_url=HOOK))
    key = queued(store, job, "e1")
    assert record(store, result("e1", job, ref=key)) == ["e1"]
    row = store.execution("e1")
    assert (row.status, row.worker_id, row.result, row.ended_at) == (
        SUCCEEDED,
        "w1",
        '{"rows":3}',
        2_500,
    )
    assert (store.jobs[job].status, store.jobs[job].updated_at) == (JobStatus.SUCCEEDED, NOW)
    [delivery] = store.deliveries
    assert (delivery.delivery.app_pk, delivery.delivery.url, delivery.created_at) == (3, HOOK, NOW)
    data = json.loads(delivery.delivery.payload)["data"]
    assert (data["jobName"], data["attempt"], data["status"], data["result"]) == (
        "report",
        1,
        "SUCCEEDED",
        {"rows": 3},
    )


def test_a_failure_with_retries_left_schedules_the_next_attempt_and_no_callback() -> None:
    store = MemoryStore()
    spec = MemoryJob(callback_url=HOOK, max_retries=2, retry_backoff_seconds=4)
    job = store.add_job(spec)
    queued(store, job, "e1")
    assert record(store, result("e1", job, FAILED)) == []
    first, retry = store.executions_of(job)
    assert (first.status, first.message) == (FAILED, "boom")
    assert (retry.attempt, retry.trigger_time, retry.status) == (
        2,
        1_000,
        ExecutionStatus.SCHEDULED,
    )
    assert retry.scheduled_at is not None
    assert NOW + 2_000 <= retry.scheduled_at <= NOW + 4_000, "backoff 4 s, jittered down to half"
    assert retry.execution_id != "e1"
    assert (store.jobs[job].status, store.jobs[job].version) == (JobStatus.RUNNING, 0)
    assert store.deliveries == []


def test_the_backoff_doubles_per_attempt_up_to_its_cap() -> None:
    store = MemoryStore()
    spec = MemoryJob(max_retries=5, retry_backoff_seconds=4, retry_backoff_max_seconds=10)
    job = store.add_job(spec)
    queued(store, job, "e3", attempt=3)
    record(store, result("e3", job, FAILED))
    retry = store.executions_of(job)[-1]
    assert retry.attempt == 4
    assert retry.scheduled_at is not None
    assert NOW + 5_000 <= retry.scheduled_at <= NOW + 10_000, "16 s capped at 10 s"


def test_a_failure_with_no_retry_left_ends_the_job_failed_with_its_callback() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(callback_url=HOOK, max_retries=1))
    queued(store, job, "e2", attempt=2)
    assert record(store, result("e2", job, ExecutionStatus.TIMED_OUT)) == ["e2"]
    assert [r.attempt for r in store.executions_of(job)] == [2]
    assert store.jobs[job].status is JobStatus.FAILED


def test_a_cancelled_job_is_not_retried_and_stays_cancelled() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(status=JobStatus.CANCELLED, callback_url=HOOK, max_retries=3))
    queued(store, job, "e1")
    assert record(store, result("e1", job, FAILED)) == ["e1"]
    assert len(store.executions_of(job)) == 1
    assert (store.jobs[job].status, store.jobs[job].version) == (JobStatus.CANCELLED, 1)


def test_a_recurring_job_moves_on_to_its_next_trigger() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(recurring=True, next_trigger_time=61_000, callback_url=HOOK))
    queued(store, job, "e1")
    assert record(store, result("e1", job, FAILED)) == ["e1"]
    kept = store.jobs[job]
    assert (kept.status, kept.next_trigger_time, kept.version) == (JobStatus.WAITING, 61_000, 1)


def test_a_recurring_job_with_no_trigger_left_ends_with_its_last_run() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(recurring=True, next_trigger_time=None))
    queued(store, job, "e1")
    record(store, result("e1", job))
    assert store.jobs[job].status is JobStatus.SUCCEEDED


def test_a_manual_run_leaves_its_job_alone_but_has_its_callback() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(status=JobStatus.WAITING, recurring=True, next_trigger_time=9))
    store.jobs[job].callback_url = HOOK
    queued(store, job, "m1", manual=True)
    assert record(store, result("m1", job, FAILED)) == ["m1"]
    kept = store.jobs[job]
    assert (kept.status, kept.version, kept.updated_at) == (JobStatus.WAITING, 0, 0)


def test_a_failed_manual_run_retries_as_a_manual_run() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(max_retries=1))
    queued(store, job, "m1", manual=True)
    record(store, result("m1", job, FAILED))
    retry = store.executions_of(job)[-1]
    assert (retry.attempt, retry.manual) == (2, True)
    assert store.jobs[job].version == 0


def test_a_result_seen_twice_is_recorded_once() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(callback_url=HOOK))
    key = queued(store, job, "e1")
    assert record(store, result("e1", job, ref=key), result("e1", job, FAILED)) == ["e1"]
    finished, deliveries = _record_in(store, FixedClock(), [result("e1", job, FAILED, ref=key)])
    assert (finished, deliveries) == ([], [])
    assert store.execution("e1").status is SUCCEEDED
    assert len(store.deliveries) == 1
    assert store.jobs[job].version == 1


def test_a_result_with_a_stale_key_is_recorded_by_its_execution_id() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob())
    queued(store, job, "e1")
    record(store, result("e1", job, ref=9_999))
    assert store.execution("e1").status is SUCCEEDED


def test_a_result_of_no_execution_of_ours_is_passed_over() -> None:
    store = MemoryStore()
    finished, deliveries = _record_in(store, FixedClock(), [result("stray", 1)])
    assert (finished, deliveries, store.executions) == ([], [], {})


def test_a_batch_of_several_jobs_and_apps_settles_each_by_its_own_rules() -> None:
    store = MemoryStore()
    one_shot = [store.add_job(MemoryJob(app_pk=app, callback_url=HOOK)) for app in (1, 2, 3)]
    retrying = store.add_job(MemoryJob(app_pk=2, max_retries=1, callback_url=HOOK))
    cron = store.add_job(MemoryJob(app_pk=3, recurring=True, next_trigger_time=70_000))
    silent = store.add_job(MemoryJob(app_pk=1))
    for n, job in enumerate([*one_shot, retrying, cron, silent]):
        queued(store, job, f"e{n}")
    queued(store, cron, "m5", manual=True)
    results = [
        result("e0", one_shot[0]),
        result("e1", one_shot[1], FAILED),
        result("e2", one_shot[2], ExecutionStatus.LOST),
        result("e3", retrying, FAILED),
        result("e4", cron),
        result("e5", silent, FAILED),
        result("m5", cron, FAILED),
        result("e0", one_shot[0], FAILED),
        result("stray", silent),
    ]
    delivered = record(store, *results)
    assert sorted(delivered) == ["e0", "e1", "e2"]
    assert {d.delivery.app_pk for d in store.deliveries} == {1, 2, 3}
    statuses = {j: store.jobs[j].status for j in [*one_shot, retrying, cron, silent]}
    assert list(statuses.values()) == [
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.FAILED,
        JobStatus.RUNNING,
        JobStatus.WAITING,
        JobStatus.FAILED,
    ]
    assert [r.status for r in store.executions_of(retrying)] == [FAILED, ExecutionStatus.SCHEDULED]
    assert store.jobs[cron].version == 1, "its manual run left it alone"


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def traced(store: MemoryStore, job_id: int, execution_id: str) -> None:
    """A QUEUED execution of trigger 1000 on w1 that carries ``TRACEPARENT``."""
    new = NewExecution(execution_id, job_id, 1, 1_000, 1_000, traceparent=TRACEPARENT)
    store.insert_executions([new.queued_on("w1")], 1_000)


def test_a_retry_carries_its_attempts_traceparent_and_the_callback_the_runs() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(callback_url=HOOK, max_retries=1))
    traced(store, job, "e1")
    assert record(store, result("e1", job, FAILED)) == []
    _, retry = store.executions_of(job)
    assert retry.traceparent == TRACEPARENT
    key = store.execution(retry.execution_id).id
    # The retry goes out and succeeds: its callback sends the run's traceparent.
    store.executions[key].status = ExecutionStatus.QUEUED
    assert record(store, result(retry.execution_id, job, ref=key)) == [retry.execution_id]
    (delivery,) = store.deliveries
    assert delivery.delivery.traceparent == TRACEPARENT


def test_an_untraced_run_has_an_untraced_callback() -> None:
    store = MemoryStore()
    job = store.add_job(MemoryJob(callback_url=HOOK))
    queued(store, job, "e1")
    record(store, result("e1", job))
    (delivery,) = store.deliveries
    assert delivery.delivery.traceparent is None


def test_a_childs_run_whose_fire_never_committed_records_the_parent_runs_it_waited_for() -> None:
    # The firer published the run, then died before its commit: the row is SCHEDULED
    # and carries nothing the fire wrote. A run already QUEUED keeps what it has.
    store = MemoryStore()
    done = store.add_job(MemoryJob(job_name="done"))
    failed = store.add_job(MemoryJob(job_name="failed"))
    queued(store, done, "p-done")
    queued(store, failed, "p-failed")
    record(store, result("p-done", done), result("p-failed", failed, FAILED))
    parents = (After(done, DependOn.SUCCEEDED), After(failed, DependOn.FINISHED))
    child = store.add_job(MemoryJob(job_name="child", after=parents))
    sent = store.add_job(MemoryJob(job_name="sent", after=parents))
    store.insert_executions([NewExecution("c1", child, 1, 1_000, 1_000)], 1_000)
    queued(store, sent, "s1")
    record(store, result("c1", child), result("s1", sent))
    waited = json.loads(store.execution("c1").waited_for or "null")
    assert [(w["jobId"], w["executionId"], w["status"]) for w in waited] == [
        (done, "p-done", "SUCCEEDED"),
        (failed, "p-failed", "FAILED"),
    ]
    assert store.execution("s1").waited_for is None
