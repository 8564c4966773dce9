"""Recalling the unstarted end of an overfull worker queue, on the in-memory store,
broker and started marks: what is taken back, what stays, and that a recalled run is
sent again and taken by one copy only (``services/dispatcher/upkeep/recall.py``).

``MemoryStore`` and ``MemoryStartedMarks`` are held to MySQL's and Redis's behaviour by
the contracts in tests/contracts; tests/integration/test_recall.py runs the recall on
the real stores, and e2e/test_fair_share.py on a whole stack.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from common.db.executions_with_job import SLOT_WAIT
from common.loadbalance import WorkerLoad
from common.memory.started_marks import MemoryStartedMarks
from common.started_marks import RECALLED
from common.states import ExecutionStatus
from services.dispatcher.routing.dispatch import Assignment, pack_dispatches, send_packs
from services.dispatcher.upkeep.recall import Recall, RecallSettings
from tests.unit.fire_books import landed
from tests.unit.fire_stage import NOW, Stage

SLOW = "report.slow"
HANDLERS = frozenset({SLOW, "demo.noop"})
QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED


@dataclass
class View:
    """The worker view the recall reads: the memory workers, with the bound, the costs
    and the in-flight count a test sets; what the recall counted afresh."""

    stage: Stage
    bound: int
    costs: dict[str, int]
    unit_ms: float = 10.0
    counted: list[tuple[str, int, float, int]] = field(default_factory=list)

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        loads = []
        for load in self.stage.workers.live(fresh_for):
            queued = sum(
                1
                for r in self.stage.store.executions.values()
                if r.worker_id == load.worker_id and r.status is QUEUED
            )
            loads.append(
                dataclasses.replace(
                    load, bound=self.bound, queued=queued, costs=self.costs, unit_ms=self.unit_ms
                )
            )
        return loads

    def repriced(self, worker_id: str, queued: int, extra_ms: float, recalled: int) -> None:
        self.counted.append((worker_id, queued, extra_ms, recalled))


def stage_with(bound: int, cost: int, queued: int) -> tuple[Stage, View, Recall]:
    """Worker "w" running ``SLOW`` (``cost`` places a run) with ``queued`` runs of it in
    its queue, sent one a millisecond; the recall on it with bound ``bound``."""
    stage = Stage(marks=MemoryStartedMarks())
    stage.worker_up("w", HANDLERS)
    for n in range(queued):
        queue_one(stage, "w", f"e{n:04d}", at=NOW + n)
    stage.later(queued)
    view = View(stage, bound, {SLOW: cost})
    assert stage.marks is not None
    recall = Recall(stage.store, stage.marks, view, RecallSettings(3_600))
    return stage, view, recall


def queue_one(stage: Stage, worker_id: str, execution_id: str, at: int) -> None:
    """A due run of a new ``SLOW`` job, fired to ``worker_id`` at ``at``: QUEUED there,
    its message in the worker's queue."""
    job = stage.job(job_name=execution_id, handler=SLOW, app_pk=1)
    stage.due(job, execution_id, at=at)
    row = stage.row(execution_id)
    sent = row.with_job(stage.store.jobs[job])
    with stage.store.transaction() as store:
        store.mark_queued({row.id: worker_id}, at)
        assert (
            send_packs(
                store, stage.publisher, pack_dispatches([Assignment.of(sent, worker_id)], at)
            )
            == set()
        )


def status_of(stage: Stage, *execution_ids: str) -> set[ExecutionStatus]:
    """The statuses these executions' rows hold."""
    return {stage.row(e).status for e in execution_ids}


def test_an_overfull_queue_gives_back_its_unstarted_end_down_to_the_bound() -> None:
    # 100 runs of 10 places against a bound of 50: 1,000 places, twenty times the bound.
    stage, view, recall = stage_with(bound=50, cost=10, queued=100)
    assert stage.marks is not None
    running = ["e0000", "e0001", "e0098"]  # the worker took these (one at the very end)
    for execution_id in running:
        stage.marks.take(execution_id, "w")
    assert recall.recall_surplus() == 94
    back = [f"e{n:04d}" for n in range(5, 98)] + ["e0099"]
    assert status_of(stage, *back) == {SCHEDULED}
    assert status_of(stage, *running, "e0002", "e0003", "e0004") == {QUEUED}
    row = stage.row("e0099")
    assert (row.worker_id, row.message, row.dispatched_at, row.scheduled_at) == (
        None,
        SLOT_WAIT,
        NOW + 99,
        NOW + 99,
    )
    assert {stage.marks.values[e] for e in back} == {RECALLED}
    assert all(stage.marks.values[e] == "w" for e in running)
    # The queue is counted afresh: 6 runs left, 9 places beyond one each, 94 taken back.
    assert view.counted == [("w", 6, 6 * 9 * 10.0, 94)]


def test_a_queue_within_twice_its_bound_is_only_counted_afresh() -> None:
    stage, view, recall = stage_with(bound=50, cost=10, queued=9)  # 90 places
    assert recall.recall_surplus() == 0
    assert status_of(stage, *(f"e{n:04d}" for n in range(9))) == {QUEUED}
    assert view.counted == [("w", 9, 9 * 9 * 10.0, 0)]


def test_a_queue_of_runs_that_take_one_place_each_is_never_read() -> None:
    stage, view, recall = stage_with(bound=5, cost=1, queued=100)
    view.costs = {}
    assert recall.recall_surplus() == 0
    assert view.counted == []
    assert status_of(stage, *(f"e{n:04d}" for n in range(100))) == {QUEUED}


def test_a_recalled_run_is_sent_again_and_runs_once_whichever_copy_comes_first() -> None:
    stage, _, recall = stage_with(bound=2, cost=10, queued=10)
    assert stage.marks is not None
    stage.worker_up("v", HANDLERS)
    assert recall.recall_surplus() == 10  # 100 places against 2: all of it goes back
    stale = landed(stage.broker, "w")
    assert len(stale) == 10
    # The firer sends them again (the memory workers bound nothing) and lifts their
    # fences first; the copies still in "w"'s queue find the key of whichever took it.
    assert stage.fire() == 10
    assert not any(e in stage.marks.values for e in stale)
    resent = {e for w in ("w", "v") for e in landed(stage.broker, w)}
    assert resent == set(stale)
    # Both copies are admitted as workers admit them: each run is taken once.
    takers = [w for w in ("w", "v") for e in landed(stage.broker, w) if stage.marks.take(e, w)]
    assert len(takers) == 10
    assert status_of(stage, *stale) == {QUEUED}


def test_a_queue_is_read_again_only_once_a_handlers_cost_has_risen_past_the_factor() -> None:
    _, view, recall = stage_with(bound=50, cost=10, queued=9)  # 90 places
    assert recall.recall_surplus() == 0
    assert len(view.counted) == 1, "a leader counts each queue once at first"
    view.costs = {SLOW: 19}
    assert recall.recall_surplus() == 0
    assert len(view.counted) == 1, "risen less than twice: not read"
    view.costs = {SLOW: 20}
    assert recall.recall_surplus() == 7  # 180 places: 7 of 9 go back, leaving 40
    assert view.counted[-1] == ("w", 2, 2 * 19 * 10.0, 7)
