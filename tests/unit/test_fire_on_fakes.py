"""Firing due executions, on the in-memory store, broker and workers: what is sent,
held, skipped or cancelled, and that each leaves once.

``MemoryStore``, ``MemoryPublisher`` and ``MemoryWorkers`` are held to MySQL's,
RabbitMQ's and the worker directory's behaviour by the contracts in tests/contracts;
tests/integration/test_firing.py runs the firer on the real stores.
"""

from __future__ import annotations

import pytest

from common.errors import PublishFailedError
from common.messages import DispatchPack
from common.schedule import PAUSED_SKIP, MisfirePolicy, OverlapPolicy
from common.states import ExecutionStatus, JobStatus
from common.topology import declare_worker_queue, worker_queue
from services.dispatcher.trigger.fire_rules import (
    CANCELLED_SKIP,
    FORBID_HOLD,
    PAUSED_HOLD,
    no_worker_reason,
)
from tests.unit.fire_books import landed
from tests.unit.fire_stage import HOLD_MS, NOOP, NOW, Stage

QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED
SKIPPED = ExecutionStatus.SKIPPED
OVERLAP_SKIP = "skipped: the previous run is still going (overlap policy FORBID)"


def test_a_due_execution_goes_to_a_live_worker_running_its_handler_and_is_queued() -> None:
    stage = Stage()
    stage.worker_up("w-noop")
    stage.worker_up("w-report", frozenset({"report.build"}))
    report = stage.job(handler="report.build")
    stage.due(report, "now")
    stage.due(report, "later", at=NOW + 60_000, attempt=2)
    assert stage.fire() == 1
    now = stage.row("now")
    assert (now.status, now.worker_id, now.dispatched_at, now.message) == (
        QUEUED,
        "w-report",
        NOW,
        None,
    )
    assert landed(stage.broker, "w-report") == ["now"]
    assert landed(stage.broker, "w-noop") == []
    assert stage.row("later").status is SCHEDULED
    assert stage.books() == []


def test_one_no_live_worker_runs_is_held_then_sent_once_a_worker_appears() -> None:
    stage = Stage()
    stage.worker_up("w1")
    report = stage.job(handler="report.build")
    stage.due(report, "e1")
    assert stage.fire() == 0
    held = stage.row("e1")
    assert (held.status, held.scheduled_at, held.worker_id) == (SCHEDULED, NOW + HOLD_MS, None)
    assert held.message == no_worker_reason("report.build")
    assert stage.books() == []
    stage.worker_up("w-report", frozenset({"report.build"}))
    stage.later(HOLD_MS - 1)
    assert stage.fire() == 0, "held until its new time"
    stage.later(1)
    assert stage.fire() == 1
    sent = stage.row("e1")
    assert (sent.status, sent.worker_id, sent.message) == (QUEUED, "w-report", None)
    assert landed(stage.broker, "w-report") == ["e1"]
    assert stage.books() == []


def test_a_worker_without_a_consumer_or_heartbeat_gets_nothing() -> None:
    stage = Stage()
    stage.worker_up("w1")
    stage.workers.set_consuming("w1", False)
    stage.due(stage.job(), "e1")
    assert stage.fire() == 0
    assert stage.row("e1").message == no_worker_reason("demo.noop")
    stage.workers.set_consuming("w1")
    stage.later(61_000 + HOLD_MS)  # w1's heartbeat is stale by then
    assert stage.fire() == 0
    stage.workers.start("w1", NOOP)
    stage.later(HOLD_MS)
    assert stage.fire() == 1
    assert stage.books() == []


def test_a_paused_jobs_trigger_is_held_and_sent_when_it_is_resumed() -> None:
    stage = Stage()
    stage.worker_up("w1")
    one_shot, retried = stage.job(status=JobStatus.PAUSED), stage.job(status=JobStatus.PAUSED)
    stage.due(one_shot, "e1")
    stage.due(retried, "retry", attempt=2)
    assert stage.fire() == 0
    assert {stage.row(e).message for e in ("e1", "retry")} == {PAUSED_HOLD}
    assert {stage.row(e).scheduled_at for e in ("e1", "retry")} == {NOW + HOLD_MS}
    assert stage.books() == []
    for job in (one_shot, retried):
        stage.store.jobs[job].status = JobStatus.RUNNING  # resumed
    stage.later(HOLD_MS)
    assert stage.fire() == 2
    assert {stage.row(e).status for e in ("e1", "retry")} == {QUEUED}
    assert stage.books() == []


def test_a_paused_recurring_jobs_trigger_is_skipped_and_a_manual_run_goes() -> None:
    stage = Stage()
    stage.worker_up("w1")
    cron = stage.job(status=JobStatus.PAUSED, recurring=True, next_trigger_time=NOW + 60_000)
    stage.due(cron, "tick")
    stage.due(cron, "manual", manual=True)
    assert stage.fire() == 1
    tick = stage.row("tick")
    assert (tick.status, tick.message, tick.ended_at) == (SKIPPED, PAUSED_SKIP, NOW)
    assert stage.row("manual").status is QUEUED
    job = stage.store.jobs[cron]
    assert (job.status, job.version) == (JobStatus.PAUSED, 0), "left to its claim"
    assert stage.books() == []


def test_a_cancelled_jobs_executions_are_cancelled_not_sent() -> None:
    stage = Stage()
    stage.worker_up("w1")
    job = stage.job(status=JobStatus.CANCELLED)
    stage.due(job, "first")
    stage.due(job, "retry", attempt=2)
    stage.due(job, "manual", manual=True)
    assert stage.fire() == 0
    for e in ("first", "retry", "manual"):
        row = stage.row(e)
        assert (row.status, row.message, row.ended_at) == (
            ExecutionStatus.CANCELLED,
            CANCELLED_SKIP,
            NOW,
        )
    assert stage.store.jobs[job].status is JobStatus.CANCELLED
    assert landed(stage.broker, "w1") == []
    assert stage.books() == []


def running(stage: Stage, job_id: int) -> None:
    """A run of ``job_id`` sent a moment ago ("going"), not reported yet."""
    stage.due(job_id, "going", at=NOW - 1_000)
    assert stage.fire() == 1


def finished(stage: Stage, execution_id: str) -> None:
    """w1 took ``execution_id``, the only message in its queue, and it succeeded."""
    taken = [
        DispatchPack.model_validate_json(m.body) for m in stage.broker.take(worker_queue("w1"))
    ]
    assert [e.execution_id for p in taken for e in p.executions] == [execution_id]
    row = stage.row(execution_id)
    row.status, row.ended_at = ExecutionStatus.SUCCEEDED, stage.clock.now


def test_overlap_forbid_skips_a_trigger_and_holds_a_retry_while_a_run_goes() -> None:
    stage = Stage()
    stage.worker_up("w1")
    cron = stage.job(recurring=True, next_trigger_time=NOW + 60_000, status=JobStatus.WAITING)
    running(stage, cron)
    stage.due(cron, "tick")
    stage.due(cron, "retry", attempt=2)
    assert stage.fire() == 0
    tick, retry = stage.row("tick"), stage.row("retry")
    assert (tick.status, tick.message) == (SKIPPED, OVERLAP_SKIP)
    assert (retry.status, retry.message, retry.scheduled_at) == (
        SCHEDULED,
        FORBID_HOLD,
        NOW + HOLD_MS,
    )
    assert stage.store.jobs[cron].version == 0, "a recurring FORBID job was never held"
    finished(stage, "going")
    stage.later(HOLD_MS)
    assert stage.fire() == 1
    assert stage.row("retry").status is QUEUED
    assert stage.books() == []


def test_overlap_forbid_sends_one_of_two_due_together() -> None:
    stage = Stage()
    stage.worker_up("w1")
    cron = stage.job(recurring=True, next_trigger_time=NOW + 60_000, status=JobStatus.WAITING)
    stage.due(cron, "a", at=NOW - 1_000)
    stage.due(cron, "b")
    assert stage.fire() == 1
    assert (stage.row("a").status, stage.row("b").status) == (QUEUED, SKIPPED)
    assert stage.books() == []


def test_overlap_queue_sends_and_a_skip_releases_the_job() -> None:
    stage = Stage()
    stage.worker_up("w1")
    queue = OverlapPolicy.QUEUE
    cron = stage.job(recurring=True, next_trigger_time=NOW + 60_000, overlap_policy=queue)
    running(stage, cron)
    stage.due(cron, "tick")
    assert stage.fire() == 1, "QUEUE waits at the claim, not here"
    assert stage.row("tick").status is QUEUED
    late = stage.job(
        recurring=True,
        next_trigger_time=NOW + 60_000,
        overlap_policy=queue,
        misfire_policy=MisfirePolicy.SKIP,
    )
    stage.due(late, "late", at=NOW - 120_000)
    assert stage.fire() == 0
    assert stage.row("late").status is SKIPPED
    job = stage.store.jobs[late]
    assert (job.status, job.version, job.updated_at) == (JobStatus.WAITING, 1, NOW)
    assert stage.books() == []


def held_cron(stage: Stage, policy: OverlapPolicy) -> int:
    """A cron its claim held RUNNING under QUEUE, since patched to ``policy``."""
    return stage.job(
        recurring=True,
        status=JobStatus.RUNNING,
        next_trigger_time=NOW + 60_000,
        overlap_policy=policy,
        misfire_policy=MisfirePolicy.SKIP,
    )


@pytest.mark.parametrize("policy", [OverlapPolicy.ALLOW, OverlapPolicy.FORBID])
def test_a_skip_releases_the_job_its_claim_held_though_its_policy_changed(
    policy: OverlapPolicy,
) -> None:
    # The skipped trigger is the job's only run not ended: its claim held the job, and
    # nothing else will release it (the job would never be claimed again).
    stage = Stage()
    stage.worker_up("w1")
    cron = held_cron(stage, policy)
    stage.due(cron, "late", at=NOW - 120_000)
    assert stage.fire() == 0
    assert stage.row("late").status is SKIPPED
    assert stage.store.jobs[cron].status is JobStatus.WAITING
    assert stage.books() == []


def test_a_skip_leaves_the_job_held_while_another_of_its_runs_goes() -> None:
    stage = Stage()
    stage.worker_up("w1")
    cron = held_cron(stage, OverlapPolicy.ALLOW)
    running(stage, cron)
    stage.due(cron, "late", at=NOW - 120_000)
    assert stage.fire() == 0
    assert stage.row("late").status is SKIPPED
    assert stage.store.jobs[cron].status is JobStatus.RUNNING, "the run going releases it"
    assert stage.books() == []


def test_overlap_allow_sends_alongside_a_run_in_progress() -> None:
    stage = Stage()
    stage.worker_up("w1")
    allow = OverlapPolicy.ALLOW
    cron = stage.job(recurring=True, next_trigger_time=NOW + 60_000, overlap_policy=allow)
    running(stage, cron)
    stage.due(cron, "a", at=NOW - 500)
    stage.due(cron, "b")
    assert stage.fire() == 2
    assert {stage.row(e).status for e in ("going", "a", "b")} == {QUEUED}
    assert stage.books() == []


def test_a_one_shot_trigger_skipped_late_ends_its_job_failed() -> None:
    stage = Stage()
    stage.worker_up("w1")
    job = stage.job(misfire_policy=MisfirePolicy.SKIP, misfire_threshold_seconds=10)
    stage.due(job, "late", at=NOW - 11_000)
    assert stage.fire() == 0
    assert stage.row("late").status is SKIPPED
    assert stage.store.jobs[job].status is JobStatus.FAILED
    assert stage.books() == []


def test_an_unrouted_pack_goes_back_to_scheduled_and_leaves_on_a_later_pass() -> None:
    stage = Stage()
    # Live to the directory (a heartbeat, a consumer), but no binding routes to its
    # queue, as when the queue went between the directory's look and the publish.
    stage.broker.queue_declare(worker_queue("w1"))
    stage.broker.consume(worker_queue("w1"))
    stage.workers.heartbeat("w1", NOOP)
    stage.handlers["w1"] = NOOP
    stage.due(stage.job(), "e1")
    assert stage.fire() == 0
    back = stage.row("e1")
    assert (back.status, back.worker_id, back.dispatched_at) == (SCHEDULED, None, None)
    declare_worker_queue(stage.broker, "w1")
    assert stage.fire() == 1
    assert landed(stage.broker, "w1") == ["e1"]
    assert stage.books() == []


def test_a_failed_publish_leaves_the_rows_for_the_next_pass_which_sends_each_once() -> None:
    stage = Stage()
    stage.worker_up("w1")
    stage.worker_up("w2")
    job_ids = [stage.job() for _ in range(6)]
    for n, job in enumerate(job_ids):
        stage.due(job, f"e{n}")
    stage.publisher.fail_next_commit()
    with pytest.raises(PublishFailedError):
        stage.fire()
    assert {stage.row(f"e{n}").status for n in range(6)} == {SCHEDULED}
    assert landed(stage.broker, "w1") + landed(stage.broker, "w2") == []
    assert stage.fire() == 6
    assert stage.fire() == 0
    assert sorted(landed(stage.broker, "w1") + landed(stage.broker, "w2")) == [
        f"e{n}" for n in range(6)
    ]
    assert stage.books() == []


def test_everything_due_leaves_in_fire_batches() -> None:
    stage = Stage(fire_batch_size=3)
    stage.worker_up("w1")
    for n in range(7):
        stage.due(stage.job(), f"e{n}")
    stage.firer.load()
    assert [stage.firer.fire_due() for _ in range(4)] == [3, 3, 1, 0]
    assert stage.publisher.commits == 3
    assert stage.books() == []
