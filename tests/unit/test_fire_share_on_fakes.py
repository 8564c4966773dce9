"""The firer's fair share on the in-memory fakes: queues hold only what their workers
start soon, and the slots go to the apps by weight and cap, whatever one app has queued;
the books checked at every turnover."""

from __future__ import annotations

from collections import Counter

from common.db.apps import AppPolicy
from common.db.executions_with_job import SLOT_WAIT, ExecutionWithJob
from common.handler_patterns import HandlerPatterns
from common.memory.rows import MemoryExecution
from common.messages import DispatchPack
from common.schedule import MisfirePolicy
from common.states import ExecutionStatus, JobStatus
from common.topology import worker_queue
from services.dispatcher.trigger.fire_rules import APP_DISABLED_HOLD, APP_DISABLED_SKIP
from tests.unit.fire_stage import NOW, Stage

QUEUED = ExecutionStatus.QUEUED
SUCCEEDED = ExecutionStatus.SUCCEEDED
BOUND = 4  # each worker's queue holds 4: 8 slots on the two workers


def a_stage() -> Stage:
    stage = Stage(queue_bound=BOUND)
    stage.worker_up("w1")
    stage.worker_up("w2")
    return stage


def flood(stage: Stage, app_pk: int, count: int, at: int = NOW, prefix: str = "") -> list[str]:
    """``count`` one-shot runs of ``app_pk`` due at ``at``."""
    name = prefix or f"app{app_pk}"
    return [stage.due(stage.job(app_pk=app_pk), f"{name}-{n}", at=at) for n in range(count)]


def turnover(stage: Stage) -> list[str]:
    """Every worker runs what its queue holds, and reports it; the ids, in start order."""
    started = []
    for worker in ("w1", "w2"):
        stage.workers.heartbeat(worker, stage.handlers[worker])
        for message in stage.broker.take(worker_queue(worker)):
            for execution in DispatchPack.model_validate_json(message.body).executions:
                row = stage.row(execution.execution_id)
                assert row.status is QUEUED and row.worker_id == worker
                row.status, row.ended_at = SUCCEEDED, stage.clock.now
                started.append(execution.execution_id)
    return started


def queued_by_worker(stage: Stage) -> Counter[str | None]:
    return Counter(r.worker_id for r in stage.store.executions.values() if r.status is QUEUED)


def test_a_quiet_apps_run_takes_the_next_free_slot_ahead_of_a_flood() -> None:
    stage = a_stage()
    flood(stage, 1, 200)
    assert stage.fire() == 2 * BOUND, "only what the queues may hold leaves"
    assert max(queued_by_worker(stage).values()) == BOUND
    [quiet] = flood(stage, 2, 1, at=NOW + 10)
    stage.later(10)
    assert stage.fire() == 0
    assert stage.row(quiet).message == SLOT_WAIT
    assert stage.books() == []
    stage.later(500)
    turnover(stage)
    stage.fire()
    assert stage.row(quiet).status is QUEUED, "served within one slot turnover"
    assert stage.books() == []


def test_slots_go_by_weight_while_both_apps_wait() -> None:
    stage = a_stage()
    stage.store.put_policy(1, AppPolicy(weight=1))
    stage.store.put_policy(3, AppPolicy(weight=3))
    flood(stage, 1, 100)
    flood(stage, 3, 100)
    started: list[str] = []
    for _ in range(10):
        stage.fire()
        assert stage.books() == []
        stage.later(500)
        started += turnover(stage)
    counts = Counter(e.split("-")[0] for e in started)
    assert counts == {"app1": 20, "app3": 60}


def test_an_app_never_has_more_runs_going_than_its_cap() -> None:
    stage = a_stage()
    stage.store.put_policy(4, AppPolicy(weight=10, max_running=3))
    capped = set(flood(stage, 4, 30))
    flood(stage, 1, 30)
    started: list[str] = []
    while len(started) < 60:
        stage.fire()
        going = [e for e, r in _rows(stage) if r.status is QUEUED and e in capped]
        assert len(going) <= 3
        assert stage.books() == []
        stage.later(500)
        started += turnover(stage)
    assert sorted(started) == sorted({*started}), "each run started once"


def test_an_apps_runs_leave_by_priority_and_the_flood_keeps_its_order() -> None:
    stage = a_stage()
    low = [stage.due(stage.job(app_pk=1, priority=0), f"low-{n}", at=NOW) for n in range(8)]
    high = [stage.due(stage.job(app_pk=1, priority=9), f"high-{n}", at=NOW + 5) for n in range(8)]
    stage.later(5)
    stage.fire()
    first = turnover(stage)
    assert sorted(first) == sorted(high)
    stage.fire()
    assert sorted(turnover(stage)) == sorted(low)


def test_a_run_that_waited_for_a_slot_is_no_misfire() -> None:
    stage = a_stage()
    for n in range(40):  # a trigger of theirs late by a minute is skipped
        stage.due(stage.job(app_pk=1, misfire_policy=MisfirePolicy.SKIP), f"late-{n}")
    started: list[str] = []
    for _ in range(20):
        stage.fire()
        stage.later(30_000)  # past the misfire threshold (60 s) after two turnovers
        started += turnover(stage)
    skipped = [e for e, r in _rows(stage) if r.status is ExecutionStatus.SKIPPED]
    assert skipped == [] and len(started) == 40


def test_a_run_that_waited_while_held_without_a_load_is_no_misfire() -> None:
    # Handed over by claims and never loaded again: the firer's own copy of each row
    # must know it waited, as a load's read of SLOT_WAIT would tell it.
    stage = a_stage()
    stage.firer.load()
    jobs = [stage.job(app_pk=1, misfire_policy=MisfirePolicy.SKIP) for _ in range(12)]
    written = [stage.due(job, f"held-{n}") for n, job in enumerate(jobs)]
    assert stage.firer.add(as_claimed(stage, written)) == 12
    started: list[str] = []
    for _ in range(3):  # 8 slots: two turnovers start all 12
        while stage.firer.fire_due():
            pass
        stage.later(61_000)  # past the misfire threshold while waiting for a slot
        started += turnover(stage)
    skipped = [e for e, r in _rows(stage) if r.status is ExecutionStatus.SKIPPED]
    assert skipped == [] and sorted(started) == sorted(written)


def test_a_disabled_app_runs_nothing_new_and_its_crons_skip_saying_why() -> None:
    stage = a_stage()
    stage.store.put_policy(5, AppPolicy(disabled=True))
    one_shot = stage.due(stage.job(app_pk=5), "one-shot")
    cron = stage.job(
        app_pk=5, recurring=True, next_trigger_time=NOW + 60_000, status=JobStatus.WAITING
    )
    tick = stage.due(cron, "tick")
    other = flood(stage, 1, 2)
    stage.fire()
    assert stage.row(tick).status is ExecutionStatus.SKIPPED
    assert stage.row(tick).message == APP_DISABLED_SKIP
    assert stage.row(one_shot).message == APP_DISABLED_HOLD
    assert stage.row(one_shot).status is ExecutionStatus.SCHEDULED
    assert all(stage.row(e).status is QUEUED for e in other)
    assert stage.books() == []
    stage.store.put_policy(5, AppPolicy())
    stage.later(5_000)
    stage.fire()
    assert stage.row(one_shot).status is QUEUED


def test_a_handler_its_app_may_no_longer_call_is_held_saying_how_to_grant_it() -> None:
    stage = a_stage()
    stage.store.put_policy(6, AppPolicy(handlers=HandlerPatterns(("report.*",))))
    held = stage.due(stage.job(app_pk=6, handler="demo.noop"), "fenced")
    stage.fire()
    row = stage.row(held)
    assert row.status is ExecutionStatus.SCHEDULED
    assert row.message is not None and "kairos app handlers" in row.message
    assert stage.books() == []


def test_many_apps_share_the_slots_and_every_run_starts_once() -> None:
    stage = a_stage()
    for app in range(1, 13):
        stage.store.put_policy(
            app, AppPolicy(weight=1 + app % 3, max_running=None if app % 4 else 2)
        )
        flood(stage, app, 20 + app * 3)
    total = len(stage.store.executions)
    started: list[str] = []
    for _ in range(400):
        if len(started) == total:
            break
        stage.fire()
        assert stage.books() == []
        stage.later(500)
        started += turnover(stage)
    assert len(started) == total == len(set(started))
    assert all(r.status is SUCCEEDED for _, r in _rows(stage))


def _rows(stage: Stage) -> list[tuple[str, MemoryExecution]]:
    return [(r.execution_id, r) for r in stage.store.executions.values()]


def test_runs_already_going_count_against_their_apps_share() -> None:
    stage = a_stage()
    first = flood(stage, 1, 6)
    stage.fire()
    assert all(stage.row(e).status is QUEUED for e in first)
    flood(stage, 1, 10, prefix="more1")
    second = flood(stage, 2, 10)
    stage.later(1)
    assert stage.fire() == 2
    assert [stage.row(e).status for e in second[:2]] == [QUEUED, QUEUED]


def as_claimed(stage: Stage, execution_ids: list[str]) -> list[ExecutionWithJob]:
    """The rows as a claim hands them over (what the store would read, by key)."""
    wanted = set(execution_ids)
    every = stage.store.scheduled_until(stage.clock.now + 60_000, 1_000_000)
    return [row for row in every if row.execution_id in wanted]


def test_runs_a_claim_wrote_are_held_by_key_and_fired_without_a_load() -> None:
    stage = a_stage()
    stage.firer.load()
    written = flood(stage, 1, 3) + flood(stage, 2, 1)
    # Not loaded: held by key only, as the dispatch loop does after a claim.
    assert stage.firer.add(as_claimed(stage, written)) == 4
    assert stage.firer.add(as_claimed(stage, written)) == 0, "held once"
    sent = 0
    while fired := stage.firer.fire_due():
        sent += fired
    assert sent == 4
    assert {stage.row(e).status for e in written} == {QUEUED}
    assert stage.books() == []


def test_an_app_holds_what_a_load_would_and_a_load_reads_its_next_runs() -> None:
    stage = Stage(queue_bound=400)
    stage.worker_up("w1")
    stage.worker_up("w2")
    per_app = 4 * 500  # HELD_BATCHES batches of the stage's 500
    stage.firer.load()
    written = flood(stage, 1, per_app + 100)
    assert stage.firer.add(as_claimed(stage, written)) == per_app, "the rest waits in the store"
    assert not stage.firer.needs_load()
    sent = 0
    while not stage.firer.needs_load():
        fired = stage.firer.fire_due()
        assert fired or turnover(stage), "nothing moves"
        sent += fired
    # A batch or less is held of an app with more in the store: a load reads on.
    assert per_app - sent <= 500
    stage.firer.load()
    assert not stage.firer.needs_load()
    while stage.firer.fire_due() or turnover(stage):
        pass
    assert all(stage.row(e).status is SUCCEEDED for e in written)
    assert stage.books() == []


def test_a_cap_set_after_the_last_load_holds_for_the_runs_a_claim_hands_over() -> None:
    stage = a_stage()
    stage.firer.load()  # the apps as they were: no cap yet
    stage.store.put_policy(7, AppPolicy(max_running=2))
    capped = flood(stage, 7, 6)
    assert stage.firer.add(as_claimed(stage, capped)) == 6
    while stage.firer.fire_due():
        pass
    assert sum(stage.row(e).status is QUEUED for e in capped) == 2
    assert stage.books() == []
