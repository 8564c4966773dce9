"""Rescuing dead and draining workers' executions, on the in-memory store, broker,
worker view and started marks: what is reported, moved, held or left, each once.

``MemoryStore``, ``MemoryPublisher``, ``MemoryWorkers`` and ``MemoryStartedMarks`` are
held to MySQL's, RabbitMQ's, the worker directory's and Redis's behaviour by the
contracts in tests/contracts; tests/integration/test_rescue.py runs the rescue on the
real stores.
"""

from __future__ import annotations

import dataclasses

import pytest

from common.errors import PublishFailedError
from common.states import ExecutionStatus, WorkerState
from common.topology import worker_queue
from services.dispatcher.trigger.fire_rules import no_worker_reason
from tests.unit.fire_books import landed
from tests.unit.rescue_stage import STALE_MS, Stage

QUEUED = ExecutionStatus.QUEUED
LOST = ExecutionStatus.LOST
FORGET_MS = 3_600_000


def dead_and_live(stage: Stage, *executions: str) -> None:
    """Workers "dead" and "live" up, ``executions`` QUEUED on "dead"."""
    stage.worker_up("dead")
    stage.worker_up("live")
    for execution_id in executions:
        stage.queued_on("dead", execution_id)


def state(stage: Stage, worker_id: str) -> WorkerState:
    """What the workers table says of the worker now."""
    return stage.store.workers[worker_id].state


def goes_stale(stage: Stage, worker_id: str = "dead") -> None:
    """The worker dies and the sweep's cut-off passes its last heartbeat."""
    stage.die(worker_id)
    stage.later(STALE_MS + 1)


def test_a_dead_workers_runs_are_reported_lost_or_moved_by_their_started_keys() -> None:
    stage = Stage()
    dead_and_live(stage, "e-ended", "e-running", "e-waiting")
    stored = stage.ended("e-ended", ExecutionStatus.SUCCEEDED)
    stage.took("e-running")
    goes_stale(stage)
    by_execution = {r.execution_id: r for r in stage.sweep()}
    assert set(by_execution) == {"e-ended", "e-running"}
    assert by_execution["e-ended"] == stored
    running = by_execution["e-running"]
    assert (running.status, running.worker_id) == (LOST, "dead")
    assert running.message == "worker dead died while running it"
    assert (stage.row("e-ended").status, stage.row("e-running").status) == (
        ExecutionStatus.SUCCEEDED,
        LOST,
    )
    waiting = stage.row("e-waiting")
    assert (waiting.status, waiting.worker_id, waiting.dispatched_at) == (
        QUEUED,
        "live",
        stage.clock.now,
    )
    assert landed(stage.broker, "live") == ["e-waiting"]
    assert stage.books() == []
    assert stage.sweep() == [], "nothing left to do"
    assert landed(stage.broker, "live") == ["e-waiting"]


def test_a_keyless_run_dispatched_before_redis_lost_its_keys_is_lost_not_moved() -> None:
    stage = Stage()
    dead_and_live(stage, "e-old")
    stage.took("e-old")
    stage.marks.lose_data()
    stage.marks.epoch(stage.clock.now)  # the next sweep's first step sets it again
    stage.later(2_000)
    stage.queued_on("dead", "e-sent-since")
    goes_stale(stage)
    [old] = stage.sweep()
    assert (old.execution_id, old.status) == ("e-old", LOST)
    assert old.message is not None and "Redis lost the mark" in old.message
    assert stage.row("e-sent-since").worker_id == "live"
    assert landed(stage.broker, "live") == ["e-sent-since"]
    assert stage.books() == []


def test_unstarted_work_no_live_worker_runs_goes_back_to_the_firer_held() -> None:
    stage = Stage()
    dead_and_live(stage, "e-noop")
    stage.queued_on("dead", "e-report", handler="report.build")
    goes_stale(stage)
    assert stage.sweep() == []
    held = stage.row("e-report")
    assert (held.status, held.worker_id, held.dispatched_at, held.scheduled_at) == (
        ExecutionStatus.SCHEDULED,
        None,
        None,
        stage.clock.now,
    )
    assert held.message == no_worker_reason("report.build")
    assert stage.row("e-noop").worker_id == "live"
    assert landed(stage.broker, "live") == ["e-noop"]
    assert stage.books() == []


def test_a_worker_with_a_stale_heartbeat_but_a_consumer_is_left_alone() -> None:
    stage = Stage(forget_ms=1)
    stage.worker_up("slow")
    stage.worker_up("live")
    stage.queued_on("slow", "e-running")
    stage.queued_on("slow", "e-waiting")
    stage.took("e-running")
    stage.hang("slow")
    stage.later(STALE_MS + 1)
    assert stage.sweep() == []
    assert {stage.row(e).worker_id for e in ("e-running", "e-waiting")} == {"slow"}
    assert state(stage, "slow") is WorkerState.ACTIVE, "not forgotten"
    assert worker_queue("slow") in stage.broker.queues()
    assert stage.books(may_stay={"e-running", "e-waiting"}) == []


def test_a_draining_workers_unstarted_work_moves_and_its_started_runs_stay() -> None:
    stage = Stage()
    stage.worker_up("drained")
    stage.worker_up("live")
    for execution_id in ("e-running", "e-ended", "e-waiting"):
        stage.queued_on("drained", execution_id)
    stage.took("e-running")
    stage.ended("e-ended", ExecutionStatus.FAILED)
    stage.drain("drained")
    assert stage.sweep() == []
    assert stage.row("e-waiting").worker_id == "live"
    assert landed(stage.broker, "live") == ["e-waiting"]
    assert {stage.row(e).worker_id for e in ("e-running", "e-ended")} == {"drained"}
    assert stage.books(may_stay={"e-running", "e-ended"}) == []
    goes_stale(stage, "drained")  # then it goes: its runs are reported
    assert {(r.execution_id, r.status) for r in stage.sweep()} == {
        ("e-running", LOST),
        ("e-ended", ExecutionStatus.FAILED),
    }
    assert stage.books() == []


def test_a_draining_worker_still_consuming_keeps_its_work() -> None:
    stage = Stage()
    stage.worker_up("draining")
    stage.worker_up("live")
    stage.queued_on("draining", "e-waiting")
    stage.running["draining"].state = WorkerState.DRAINING
    stage.later(0)
    assert stage.sweep() == []
    assert stage.row("e-waiting").worker_id == "draining"
    assert stage.books(may_stay={"e-waiting"}) == []


def test_a_gone_worker_with_nothing_left_is_forgotten_after_forget_ms() -> None:
    stage = Stage(forget_ms=FORGET_MS)
    stage.worker_up("gone")
    stage.worker_up("busy")
    stage.worker_up("live")
    stage.queued_on("busy", "e-report", handler="report.build")
    goes_stale(stage, "gone")
    stage.die("busy")
    assert stage.sweep() == []
    assert state(stage, "gone") is WorkerState.ACTIVE, "not gone for long yet"
    stage.later(FORGET_MS)
    assert stage.sweep() == []
    assert state(stage, "gone") is WorkerState.FORGOTTEN
    assert worker_queue("gone") not in stage.broker.queues()
    # Its work went back to the firer in this sweep: it is forgotten on the next one.
    assert stage.row("e-report").status is ExecutionStatus.SCHEDULED
    assert state(stage, "busy") is WorkerState.ACTIVE
    stage.later(1)  # it died a moment after "gone"
    assert stage.sweep() == []
    assert state(stage, "busy") is WorkerState.FORGOTTEN
    assert worker_queue("busy") not in stage.broker.queues()
    assert state(stage, "live") is WorkerState.ACTIVE
    assert stage.books() == []
    stage.worker_up("gone")  # it comes back
    assert state(stage, "gone") is WorkerState.ACTIVE


def test_a_forget_whose_queue_delete_fails_is_rolled_back_and_done_later() -> None:
    stage = Stage(forget_ms=FORGET_MS)
    stage.worker_up("gone")
    goes_stale(stage, "gone")
    stage.later(FORGET_MS)
    stage.broker.refuse_next_delete()
    stage.sweep()
    assert state(stage, "gone") is WorkerState.ACTIVE
    assert worker_queue("gone") in stage.broker.queues()
    stage.sweep()
    assert state(stage, "gone") is WorkerState.FORGOTTEN
    assert worker_queue("gone") not in stage.broker.queues()


def test_a_failed_report_leaves_all_for_the_next_sweep_which_does_each_once() -> None:
    stage = Stage()
    dead_and_live(stage, "e-running", "e-waiting")
    stage.took("e-running")
    goes_stale(stage)
    stage.publisher.fail_next_commit()
    with pytest.raises(PublishFailedError):
        stage.sweep()
    assert stage.record() == []
    assert {stage.row(e).worker_id for e in ("e-running", "e-waiting")} == {"dead"}
    assert landed(stage.broker, "live") == []
    assert [(r.execution_id, r.status) for r in stage.sweep()] == [("e-running", LOST)]
    assert landed(stage.broker, "live") == ["e-waiting"]
    assert stage.books() == []


def test_a_failed_move_leaves_the_rows_on_the_dead_worker_and_sends_each_once() -> None:
    stage = Stage()
    dead_and_live(stage, "e1", "e2", "e3")
    goes_stale(stage)
    before = {e: dataclasses.replace(stage.row(e)) for e in ("e1", "e2", "e3")}
    stage.publisher.fail_next_commit()
    with pytest.raises(PublishFailedError):
        stage.sweep()
    assert {e: stage.row(e) for e in before} == before, "rolled back"
    assert landed(stage.broker, "live") == []
    assert stage.books(may_stay=set(before)) == []
    assert stage.sweep() == []
    assert sorted(landed(stage.broker, "live")) == ["e1", "e2", "e3"]
    assert {stage.row(e).worker_id for e in before} == {"live"}
    assert stage.books() == []
    assert stage.sweep() == []
    assert sorted(landed(stage.broker, "live")) == ["e1", "e2", "e3"], "sent once"


def test_work_moved_to_a_worker_whose_queue_no_binding_reaches_goes_back_to_the_firer() -> None:
    stage = Stage()
    dead_and_live(stage, "e1")
    # "live" is live to the directory, but nothing routes to its queue any more.
    stage.broker.queue_delete(worker_queue("live"))
    stage.broker.queue_declare(worker_queue("live"))
    stage.broker.consume(worker_queue("live"))
    goes_stale(stage)
    assert stage.sweep() == []
    row = stage.row("e1")
    assert (row.status, row.worker_id, row.dispatched_at) == (ExecutionStatus.SCHEDULED, None, None)
    assert stage.books() == []
