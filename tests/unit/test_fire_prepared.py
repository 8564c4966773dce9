"""The warm-up chooses the runs due at the next instant, so that at their time they are
only locked, marked and sent; on the in-memory fakes, the books checked after each step."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from common.db.apps import AppPolicy
from common.db.executions_with_job import SLOT_WAIT
from common.loadbalance import WorkerChooser, WorkerLoad
from common.states import ExecutionStatus, JobStatus
from services.dispatcher.trigger.fire import WARM_UP_MS
from tests.unit.fire_stage import NOW, Stage
from tests.unit.test_fire_share_on_fakes import flood, queued_by_worker, turnover

QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED
INSTANT = NOW + WARM_UP_MS // 2


@pytest.fixture
def choices(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every worker choice made, by handler, in order."""
    made: list[str] = []
    choose = WorkerChooser.choose

    def counted(self: WorkerChooser, workers: Sequence[WorkerLoad], handler: str):  # type: ignore[no-untyped-def]
        made.append(handler)
        return choose(self, workers, handler)

    monkeypatch.setattr(WorkerChooser, "choose", counted)
    yield made


def warm_stage(queue_bound: int | None = None) -> Stage:
    stage = Stage(queue_bound=queue_bound)
    stage.worker_up("w1")
    stage.worker_up("w2")
    return stage


def statuses(stage: Stage, execution_ids: list[str]) -> set[ExecutionStatus]:
    return {stage.row(e).status for e in execution_ids}


def test_the_instants_runs_are_chosen_in_the_warm_up_and_only_sent_at_their_time(
    choices: list[str],
) -> None:
    stage = warm_stage()
    burst = flood(stage, 1, 300, at=INSTANT)
    stage.firer.load()
    stage.firer.warm_up()
    assert len(choices) == 300, "routed and ranked ahead of the instant"
    assert stage.firer.fire_due() == 0, "nothing leaves before its time"
    assert statuses(stage, burst) == {SCHEDULED}
    assert stage.firer.next_wake() == INSTANT
    stage.clock.now = INSTANT
    assert stage.firer.fire_due() == 300
    assert len(choices) == 300, "no choice left for the instant itself"
    assert statuses(stage, burst) == {QUEUED}
    assert stage.firer.fire_due() == 0
    assert stage.books() == []


def test_a_load_before_the_instant_keeps_the_choice_for_what_it_reads_still_due(
    choices: list[str],
) -> None:
    stage = warm_stage()
    cancelled_job = stage.job(app_pk=1)
    cancelled = stage.due(cancelled_job, "cancelled", at=INSTANT)
    burst = flood(stage, 1, 50, at=INSTANT)
    stage.firer.load()
    stage.firer.warm_up()
    stage.store.jobs[cancelled_job].status = JobStatus.CANCELLED
    late = flood(stage, 2, 5, at=INSTANT, prefix="late")
    stage.firer.load()
    stage.firer.warm_up()
    assert len(choices) == 51, "the load kept the choice and made no second one"
    stage.clock.now = INSTANT
    assert stage.firer.fire_due() == 55, "what came since goes in the same batch"
    assert statuses(stage, burst + late) == {QUEUED}
    assert stage.row(cancelled).status is ExecutionStatus.CANCELLED, "as its job is now"
    assert stage.books() == []


def test_what_no_slot_was_free_for_ahead_waits_from_the_instant_on() -> None:
    stage = warm_stage(queue_bound=4)
    burst = flood(stage, 1, 20, at=INSTANT)
    stage.firer.load()
    stage.firer.warm_up()
    stage.clock.now = INSTANT
    assert stage.firer.fire_due() == 8, "what the queues may hold"
    assert max(queued_by_worker(stage).values()) == 4
    waiting = [e for e in burst if stage.row(e).status is SCHEDULED]
    assert len(waiting) == 12 and {stage.row(e).message for e in waiting} == {SLOT_WAIT}
    assert stage.books() == []
    stage.later(500)
    turnover(stage)
    assert stage.firer.fire_due() == 8
    assert stage.books() == []


def test_nothing_is_chosen_ahead_while_runs_wait_so_the_share_decides_at_the_instant(
    choices: list[str],
) -> None:
    stage = warm_stage(queue_bound=4)
    flood(stage, 1, 40)
    stage.fire()
    made = len(choices)
    [quiet] = flood(stage, 2, 1, at=NOW + WARM_UP_MS // 2)
    stage.firer.load()
    stage.firer.warm_up()
    assert len(choices) == made, "no choice ahead of a contended instant"
    stage.later(WARM_UP_MS)
    turnover(stage)
    stage.firer.fire_due()
    assert stage.row(quiet).status is QUEUED, "the quiet app's run took the first free slot"
    assert stage.books() == []


def test_an_apps_cap_holds_across_a_choice_made_ahead_and_a_load() -> None:
    stage = warm_stage()
    stage.store.put_policy(3, AppPolicy(max_running=3))
    capped = flood(stage, 3, 10, at=INSTANT)
    stage.firer.load()
    stage.firer.warm_up()
    flood(stage, 3, 5, at=INSTANT, prefix="more3")
    stage.firer.load()
    stage.clock.now = INSTANT
    while stage.firer.fire_due():
        pass
    going = [r for r in stage.store.executions.values() if r.status is QUEUED]
    assert len(going) == 3
    assert statuses(stage, capped[:3]) == {QUEUED}
    assert stage.books() == []


def test_what_came_since_the_choice_takes_only_the_room_the_choice_left() -> None:
    stage = warm_stage(queue_bound=4)
    flood(stage, 1, 8, at=INSTANT)
    stage.firer.load()
    stage.firer.warm_up()
    flood(stage, 2, 5, at=INSTANT)
    stage.firer.add(stage.store.scheduled_until(INSTANT, 1_000))
    stage.clock.now = INSTANT
    assert stage.firer.fire_due() == 8
    assert max(queued_by_worker(stage).values()) == 4, "no queue holds more than its bound"
    assert stage.books() == []


def test_claims_leave_every_run_to_the_firer_while_a_choice_ahead_holds_room() -> None:
    stage = warm_stage()
    flood(stage, 1, 10, at=INSTANT)
    stage.firer.load()
    assert not stage.firer.claims_hold_off()
    stage.firer.warm_up()
    assert stage.firer.claims_hold_off(), "its picks are not in a reloaded worker view"
    stage.clock.now = INSTANT
    assert stage.firer.fire_due() == 10
    assert not stage.firer.claims_hold_off()
