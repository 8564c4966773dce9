"""Job dependencies as pure rules: which parent run a child's run waits for, what its
end means, and cycle detection (``common.dependencies``)."""

from __future__ import annotations

from common.dependencies import (
    ChildRun,
    DependOn,
    Edge,
    ParentRun,
    find_cycle,
    judge,
    matching_run,
    runs_by_job,
)
from common.states import ExecutionStatus, JobStatus

S = ExecutionStatus
T = 1_000_000


def _edge(parent: int = 1, on: DependOn = DependOn.SUCCEEDED, **kw: object) -> Edge:
    fields: dict[str, object] = {
        "child_job_id": 9,
        "parent_job_id": parent,
        "on": on,
        "parent_deleted": False,
        "parent_recurring": False,
        "parent_status": JobStatus.RUNNING,
        "parent_next_trigger_time": None,
    }
    fields.update(kw)
    return Edge(**fields)  # type: ignore[arg-type]


def _run(job: int, eid: str, status: S, trigger: int = T, attempt: int = 1) -> ParentRun:
    return ParentRun(job, eid, trigger, attempt, status)


ONCE = ChildRun(key=1, job_id=9, trigger_time=T + 500, recurring=False, job_created_at=T - 10)
CRON = ChildRun(key=1, job_id=9, trigger_time=T, recurring=True, job_created_at=T - 60_000)


def test_a_one_shot_parent_is_matched_by_its_latest_attempt() -> None:
    runs = [_run(1, "a1", S.FAILED), _run(1, "a2", S.SCHEDULED, attempt=2), _run(2, "x", S.FAILED)]
    assert matching_run(ONCE, _edge(), runs) == runs[1]
    verdict = judge(ONCE, [_edge()], runs_by_job(runs))
    assert (verdict.ready, verdict.skip, verdict.reason) == (
        False,
        False,
        "waiting: parent job 1 run a2 is SCHEDULED",
    )


def test_a_recurring_child_waits_for_the_parent_run_at_its_own_trigger_time() -> None:
    edge = _edge(parent_recurring=True, parent_next_trigger_time=T + 60_000)
    runs = [_run(1, "t0", S.SUCCEEDED, T - 60_000), _run(1, "t1", S.SUCCEEDED, T)]
    verdict = judge(CRON, [edge], runs_by_job(runs))
    assert verdict.ready and verdict.waited == (runs[1],)


def test_a_recurring_parent_with_no_run_at_the_trigger_time_skips_once_its_schedule_passed() -> (
    None
):
    passed = _edge(parent_recurring=True, parent_next_trigger_time=T + 1)
    coming = _edge(parent_recurring=True, parent_next_trigger_time=T)
    assert judge(CRON, [passed], runs_by_job([])).skip
    assert (
        not judge(CRON, [coming], runs_by_job([])).skip
        and not judge(CRON, [coming], runs_by_job([])).ready
    )


def test_a_one_shot_child_of_a_recurring_parent_waits_for_its_first_run_after_creation() -> None:
    edge = _edge(parent_recurring=True, parent_next_trigger_time=T + 60_000)
    before = _run(1, "old", S.SUCCEEDED, T - 60_000)
    after = _run(1, "new", S.QUEUED, T)
    assert matching_run(ONCE, edge, [before, after]) == after
    assert not judge(ONCE, [edge], runs_by_job([before])).ready


def test_finished_takes_a_failed_run_succeeded_does_not() -> None:
    runs = [_run(1, "e-1", S.FAILED)]
    assert judge(ONCE, [_edge(on=DependOn.FINISHED)], runs_by_job(runs)).ready
    verdict = judge(ONCE, [_edge()], runs_by_job(runs))
    assert verdict.skip and verdict.reason == "skipped: parent job 1 run e-1 FAILED"
    assert verdict.waited == tuple(runs)


def test_a_skipped_or_cancelled_parent_run_skips_even_under_finished() -> None:
    for status in (S.SKIPPED, S.CANCELLED):
        assert judge(ONCE, [_edge(on=DependOn.FINISHED)], runs_by_job([_run(1, "e", status)])).skip


def test_a_deleted_or_ended_parent_without_a_run_never_leaves_the_child_waiting() -> None:
    assert judge(
        ONCE, [_edge(parent_deleted=True)], runs_by_job([_run(1, "e", S.SUCCEEDED)])
    ).reason == ("skipped: parent job 1 was deleted")
    assert judge(ONCE, [_edge(parent_status=JobStatus.CANCELLED)], runs_by_job([])).skip


def test_fan_in_is_ready_only_when_every_parent_ended_as_named() -> None:
    edges = [_edge(1), _edge(2, DependOn.FINISHED)]
    one = [_run(1, "a", S.SUCCEEDED)]
    assert not judge(ONCE, edges, runs_by_job(one)).ready
    both = [*one, _run(2, "b", S.TIMED_OUT)]
    verdict = judge(ONCE, edges, runs_by_job(both))
    assert verdict.ready and [r.execution_id for r in verdict.waited] == ["a", "b"]


def test_find_cycle_names_the_path_and_allows_a_diamond() -> None:
    diamond = {4: [2, 3], 2: [1], 3: [1]}
    assert find_cycle(diamond, 4) is None
    assert find_cycle({1: [3], 3: [2], 2: [1]}, 1) == [1, 3, 2, 1]
    assert find_cycle({5: [5]}, 5) == [5, 5]
