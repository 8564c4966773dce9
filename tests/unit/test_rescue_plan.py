"""A dead worker's unfinished executions sorted by their started keys: reported, lost,
not knowable, or moved."""

from __future__ import annotations

from dataclasses import replace

from common.clock import CLOCK_SLACK_MS
from common.db.executions_with_job import ExecutionWithJob
from common.started_marks import RECONCILER, RunMark
from common.states import ExecutionStatus
from services.dispatcher.upkeep.rescue_plan import plan_rescue
from tests.unit.due_rows import due_row as row

DEAD = "w-dead"
EPOCH = 500_000  # Redis has kept started keys since then
AFTER_EPOCH = EPOCH + CLOCK_SLACK_MS + 1


def queued(n: int, dispatched_at: int | None = AFTER_EPOCH) -> ExecutionWithJob:
    return replace(
        row(n), status=ExecutionStatus.QUEUED, worker_id=DEAD, dispatched_at=dispatched_at
    )


def test_each_execution_lands_in_exactly_one_part_by_its_started_key() -> None:
    rows = [queued(n) for n in range(1, 8)]
    rows[5] = queued(6, dispatched_at=EPOCH - 1)  # before the epoch: its key may be lost
    rows[6] = queued(7, dispatched_at=None)  # never stamped: the same
    marks = {
        "e1": RunMark(DEAD, '{"v":1}'),  # ran and stored its outcome
        "e2": RunMark(DEAD),  # running when the worker died
        "e3": RunMark(RECONCILER),  # fenced by the reconciler
        # e4, e5: no key, dispatched after the epoch: never started
    }
    plan = plan_rescue(DEAD, rows, marks, EPOCH)
    assert [(r.execution_id, o) for r, o in plan.ended] == [("e1", '{"v":1}')]
    assert [r.execution_id for r in plan.lost] == ["e2"]
    assert [r.execution_id for r in plan.unknown] == ["e6", "e7"]
    assert [r.execution_id for r in plan.unstarted] == ["e3", "e4", "e5"]
    parts = [r for r, _ in plan.ended] + plan.lost + plan.unknown + plan.unstarted
    assert sorted(r.execution_id for r in parts) == sorted(r.execution_id for r in rows)


def test_a_key_within_the_clock_slack_of_the_epoch_counts_as_maybe_lost() -> None:
    near = queued(1, dispatched_at=EPOCH + CLOCK_SLACK_MS - 1)
    plan = plan_rescue(DEAD, [near], {}, EPOCH)
    assert plan.unknown == [near] and not plan.unstarted


def test_a_started_key_of_this_worker_wins_over_the_epoch() -> None:
    old = queued(1, dispatched_at=EPOCH - 10_000)
    plan = plan_rescue(DEAD, [old], {"e1": RunMark(DEAD)}, EPOCH)
    assert plan.lost == [old] and not plan.unknown


def test_nothing_to_rescue_is_an_empty_plan() -> None:
    plan = plan_rescue(DEAD, [], {}, EPOCH)
    assert (plan.ended, plan.lost, plan.unknown, plan.unstarted) == ([], [], [], [])
