"""A crowd of workers and their executions, swept sweep after sweep while workers die,
hang, drain and start on the in-memory fakes; the books checked after every sweep
(tests/unit/rescue_books.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import PublishFailedError
from common.states import ExecutionStatus
from tests.unit.rescue_stage import NOOP, STALE_MS, Stage

REPORT = frozenset({"demo.noop", "report.build"})
MAIL = frozenset({"mail.send"})
ONLY_REPORT = frozenset({"report.build"})
WORKERS = {
    "w0": NOOP, "w1": NOOP, "w2": NOOP, "w3": NOOP, "w4": REPORT,
    "w5": REPORT, "w6": MAIL, "w7": MAIL, "w8": ONLY_REPORT, "w9": NOOP,
}  # fmt: skip
STEP_MS = 5_000
# What happens to whom before the sweep of each step.
DIES = {0: ["w0", "w6"], 3: ["w1", "w7"], 6: ["w4"], 8: ["w8"]}
HANGS = {0: ["w9"]}
DRAINS = {0: ["w4"], 4: ["w5"]}
STARTS = {5: [("w10", MAIL)], 7: [("w11", ONLY_REPORT)]}
FAILS = 7  # the step whose first publish fails (w1's and w7's rescue)


@dataclass
class Cast:
    """Who is dead (and since when), hung or draining, as the test made them."""

    died: dict[str, int] = field(default_factory=dict)
    hung: set[str] = field(default_factory=set)
    draining: set[str] = field(default_factory=set)


def may_stay(stage: Stage, cast: Cast, failed: bool) -> set[str]:
    """Executions QUEUED on a worker not live that the rescue rightly leaves there now."""
    now = stage.clock.now
    stay: set[str] = set()
    for row in stage.store.executions.values():
        if row.status is not ExecutionStatus.QUEUED or row.worker_id is None:
            continue
        w = row.worker_id
        started = stage.marks.read_runs([row.execution_id])[0].owner is not None
        not_stale_yet = w in cast.died and cast.died[w] >= now - STALE_MS
        if failed or w in cast.hung or not_stale_yet or (w in cast.draining and started):
            stay.add(row.execution_id)
    return stay


def crowd(stage: Stage) -> dict[str, str]:
    """300 executions spread over the workers that run their handlers, each started,
    ended or not; the fate each is set up for, by execution id."""
    fates: dict[str, str] = {}
    handlers = ["demo.noop", "report.build", "mail.send"]
    for n in range(300):
        handler = handlers[n % 3]
        able = sorted(w for w, h in WORKERS.items() if handler in h)
        worker = able[n // 3 % len(able)]
        execution_id = f"{worker}-{handler}-{n}"
        stage.queued_on(worker, execution_id, handler)
        fate = ("running", "succeeded", "failed", "unstarted", "unstarted")[n % 5]
        if fate == "running":
            stage.took(execution_id)
        elif fate != "unstarted":
            stage.ended(execution_id, ExecutionStatus(fate.upper()))
        fates[execution_id] = fate
    return fates


def happen(stage: Stage, cast: Cast, step: int) -> None:
    """What the cast does before the sweep of ``step``."""
    for worker_id in DIES.get(step, []):
        stage.die(worker_id)
        cast.died[worker_id] = stage.clock.now
    for worker_id in HANGS.get(step, []):
        stage.hang(worker_id)
        cast.hung.add(worker_id)
    for worker_id in DRAINS.get(step, []):
        stage.drain(worker_id)
        cast.draining.add(worker_id)
    for worker_id, handlers in STARTS.get(step, []):
        stage.worker_up(worker_id, handlers)


def test_a_crowd_of_workers_dying_hanging_and_draining_each_execution_settles_once() -> None:
    stage = Stage(forget_ms=30_000)
    for worker_id, handlers in WORKERS.items():
        stage.worker_up(worker_id, handlers)
    fates = crowd(stage)
    cast = Cast()
    failed: list[int] = []
    for step in range(16):
        happen(stage, cast, step)
        if step == FAILS:
            stage.publisher.fail_next_commit()
        try:
            stage.sweep()
        except PublishFailedError:
            failed.append(step)  # what it had not done is left for the next sweep
            stage.record()
            assert stage.books(may_stay(stage, cast, failed=True)) == [], f"step {step}"
        else:
            assert stage.books(may_stay(stage, cast, failed=False)) == [], f"step {step}"
        stage.later(STEP_MS)
    assert failed == [FAILS]
    reported = {r.execution_id: r for r in stage.reported}
    dead = set(cast.died)
    for execution_id, fate in fates.items():
        row = stage.row(execution_id)
        first = execution_id.split("-")[0]
        if first in dead and fate != "unstarted":
            expected = ExecutionStatus.LOST if fate == "running" else ExecutionStatus(fate.upper())
            assert reported[execution_id].status == expected, execution_id
            assert row.status is expected, execution_id
        elif first in dead:
            assert execution_id not in reported
            assert row.status in (ExecutionStatus.QUEUED, ExecutionStatus.SCHEDULED)
            assert row.worker_id not in dead, execution_id
        elif first in cast.hung:
            assert (row.status, row.worker_id) == (ExecutionStatus.QUEUED, first)
    held = [e for e in fates if stage.row(e).status is ExecutionStatus.SCHEDULED]
    assert held, "work no live worker ran went back to the firer"
    moved = [r for r in stage.store.executions.values() if r.worker_id in {"w2", "w3", "w10"}]
    assert moved, "live workers took work off the dead"
    forgotten = {w for w, r in stage.store.workers.items() if r.state.value == "FORGOTTEN"}
    assert forgotten and forgotten <= dead
