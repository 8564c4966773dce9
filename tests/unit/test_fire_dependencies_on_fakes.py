"""The firer's dependency rule on the in-memory store: a child's due run is held while
its parent's run goes, sent once it succeeded (recording what it waited for), and
SKIPPED with the reason when the parent's run failed; a long wait is no misfire."""

from __future__ import annotations

import json
from collections.abc import Sequence

from common.db.job_dependencies import After
from common.dependencies import DependOn
from common.schedule import MisfirePolicy
from common.states import ExecutionStatus, JobStatus
from services.dispatcher.trigger.fire_dependencies import (
    DEPENDENCY_HOLD_MAX_MS,
    DEPENDENCY_HOLD_MS,
    dependency_hold_ms,
)
from tests.unit.fire_stage import NOW, Stage

QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED


def _chain(stage: Stage, on: DependOn = DependOn.SUCCEEDED) -> tuple[int, int]:
    parent = stage.job()
    child = stage.job(
        after=(After(parent, on),), created_at=NOW - 1, misfire_policy=MisfirePolicy.SKIP
    )
    stage.due(parent, "p1")
    stage.due(child, "c1")
    return parent, child


def test_a_child_waits_for_its_parent_and_goes_once_it_succeeded() -> None:
    stage = Stage()
    stage.worker_up("w1")
    _chain(stage)
    assert stage.fire() == 1
    assert stage.row("p1").status is QUEUED
    held = stage.row("c1")
    assert (held.status, held.scheduled_at) == (SCHEDULED, NOW + DEPENDENCY_HOLD_MS)
    assert held.message == "waiting: parent job 1 run p1 is SCHEDULED"
    # Ten minutes later (far past the misfire threshold: the dispatcher was away, say)
    # the parent succeeds; the child's policy SKIP does not judge its wait a misfire.
    stage.later(600_000)
    stage.workers.start("w1", frozenset({"demo.noop"}))
    stage.row("p1").status = ExecutionStatus.SUCCEEDED
    assert stage.fire() == 1
    sent = stage.row("c1")
    assert sent.status is QUEUED
    assert json.loads(sent.waited_for or "") == [
        {"jobId": 1, "executionId": "p1", "status": "SUCCEEDED"}
    ]


def test_a_failed_parent_skips_the_child_with_the_reason() -> None:
    stage = Stage()
    stage.worker_up("w1")
    _chain(stage)
    stage.fire()
    stage.row("p1").status = ExecutionStatus.FAILED
    stage.later(DEPENDENCY_HOLD_MS)
    assert stage.fire() == 0
    skipped = stage.row("c1")
    assert (skipped.status, skipped.message) == (
        ExecutionStatus.SKIPPED,
        "skipped: parent job 1 run p1 FAILED",
    )
    assert json.loads(skipped.waited_for or "")[0]["executionId"] == "p1"


def test_finished_lets_a_failed_parent_through() -> None:
    stage = Stage()
    stage.worker_up("w1")
    _chain(stage, DependOn.FINISHED)
    stage.fire()
    stage.row("p1").status = ExecutionStatus.FAILED
    stage.later(DEPENDENCY_HOLD_MS)
    assert stage.fire() == 1
    assert stage.row("c1").status is QUEUED


def test_a_manual_run_of_a_child_does_not_wait() -> None:
    stage = Stage()
    stage.worker_up("w1")
    parent = stage.job()
    child = stage.job(after=(After(parent, DependOn.SUCCEEDED),))
    stage.due(child, "m1", manual=True)
    assert stage.fire() == 1
    assert stage.row("m1").waited_for is None


def test_a_long_wait_is_looked_at_less_often_within_bounds() -> None:
    stage = Stage()
    stage.worker_up("w1")
    parent = stage.job()
    child = stage.job(after=(After(parent, DependOn.SUCCEEDED),))
    stage.due(parent, "p1", at=NOW + 3_600_000)  # the parent runs in an hour
    stage.due(child, "c1", at=NOW - 100_000)  # the child was due 100 s ago
    stage.fire()
    assert stage.row("c1").scheduled_at == NOW + 10_000
    row = stage.row("c1").with_job(stage.store.jobs[child])
    assert dependency_hold_ms(row, NOW) == 10_000
    assert dependency_hold_ms(row, NOW + 86_400_000) == DEPENDENCY_HOLD_MAX_MS
    assert dependency_hold_ms(row, row.trigger_time) == DEPENDENCY_HOLD_MS


def test_a_parent_deleted_while_the_child_waits_skips_it_with_the_reason() -> None:
    stage = Stage()
    stage.worker_up("w1")
    parent, _ = _chain(stage)
    stage.fire()
    stage.store.jobs[parent].deleted = True  # its run, already sent, goes on
    stage.later(DEPENDENCY_HOLD_MS)
    assert stage.fire() == 0
    skipped = stage.row("c1")
    assert (skipped.status, skipped.message) == (
        ExecutionStatus.SKIPPED,
        "skipped: parent job 1 was deleted",
    )


def test_a_run_skipped_at_fire_time_wakes_its_own_childrens_held_runs() -> None:
    stage = Stage()
    stage.worker_up("w1")
    _, middle = _chain(stage)  # job 1 runs p1; job 2, after it, runs c1
    last = stage.job(after=(After(middle, DependOn.SUCCEEDED),), created_at=NOW - 1)
    stage.due(last, "t1")
    assert stage.fire() == 1  # p1 goes; c1 waits for it, t1 for c1
    stage.row("p1").status = ExecutionStatus.FAILED
    stage.later(DEPENDENCY_HOLD_MS)
    assert stage.fire() == 0
    assert stage.row("c1").status is ExecutionStatus.SKIPPED
    # t1 was judged in the same pass, while c1 was still SCHEDULED, and held again; the
    # skip of c1 brought it forward to now instead of after its hold time.
    woken = stage.row("t1")
    assert (woken.status, woken.scheduled_at) == (SCHEDULED, stage.clock.now_ms())
    assert woken.message == "waiting: parent job 2 run c1 is SCHEDULED"


def test_runs_of_jobs_without_children_ended_at_fire_time_wake_nothing() -> None:
    stage = Stage()
    stage.worker_up("w1")
    lonely = stage.job(status=JobStatus.CANCELLED)
    stage.due(lonely, "x1")
    wakes: list[list[int]] = []
    real = stage.store.wake_children

    def counted(parent_job_ids: Sequence[int], now_ms: int) -> int:
        wakes.append(list(parent_job_ids))
        return real(parent_job_ids, now_ms)

    stage.store.wake_children = counted  # type: ignore[method-assign]
    stage.fire()
    assert stage.row("x1").status is ExecutionStatus.CANCELLED
    assert wakes == [], "a job no other waits for costs the fire no wake"
