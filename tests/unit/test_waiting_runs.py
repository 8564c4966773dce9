"""The firer's waiting runs, kept in each app's line between passes, pick what the fair
share over the same runs ranked afresh would pick."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from common.db.executions_with_job import ExecutionWithJob
from common.fair_share import Share, pick_fair, pick_from_lines
from services.dispatcher.trigger.waiting_runs import WaitingRuns
from tests.unit.due_rows import NOW, due_row

AGING = 1_000


def run(n: int, app: int, priority: int = 5, at: int = NOW, handler: str = "h") -> ExecutionWithJob:
    return due_row(n, app_pk=app, priority=priority, scheduled_at=at, handler=handler)


def contends(row: ExecutionWithJob) -> bool:
    return row.handler == "h"


def line_of(rows: list[ExecutionWithJob]) -> WaitingRuns:
    line = WaitingRuns(AGING)
    for row in rows:
        line.add(row)
    line.sort("terms", contends)
    return line


def test_each_app_line_gives_its_runs_by_priority_then_due_time() -> None:
    line = line_of([run(1, 1, at=NOW), run(2, 1, priority=9, at=NOW + 5), run(3, 2)])
    line.remove("e3")
    first = line.lines()[1]
    assert [first.pop().id, first.pop().id] == [2, 1]
    assert line.lines()[2].best() is None, "a run removed is passed over"


def test_runs_that_need_no_slot_settle_apart_and_a_new_sort_moves_them() -> None:
    line = line_of([run(1, 1), run(2, 1, handler="paused")])
    assert [r.id for r in line.settling()] == [2]
    assert line.contending() == 1
    line.sort("terms", contends)
    assert [r.id for r in line.settling()] == [2], "the same terms sort nothing again"
    line.sort("other terms", lambda row: True)
    assert line.settling() == []
    assert line.contending() == 2


def test_a_run_added_again_is_taken_once() -> None:
    line = line_of([run(1, 1), run(2, 1, at=NOW + 1)])
    line.add(run(1, 1))  # read anew by a load: its old entry is stale
    taken = pick_from_lines(line.lines(), {}, lambda r: True, 10, AGING)
    assert [r.id for r in taken] == [1, 2]


def test_the_runs_said_to_wait_leave_the_unmarked() -> None:
    line = line_of([run(1, 1), run(2, 1), replace(run(3, 1), waited=True)])
    assert {r.id for r in line.unmarked()} == {1, 2}, "a run read as waiting is marked"
    line.marked([run(1, 1)])
    line.remove("e2")
    assert line.unmarked() == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(0, 9), st.integers(0, 3_000)),
        min_size=1,
        max_size=60,
    ),
    st.sets(st.integers(0, 59)),
    st.sets(st.integers(0, 59)),
    st.integers(1, 30),
    st.dictionaries(st.integers(1, 4), st.tuples(st.integers(1, 3), st.integers(0, 5))),
)
def test_kept_lines_pick_what_a_fresh_ranking_picks(
    specs: list[tuple[int, int, int]],
    removed: set[int],
    no_slot: set[int],
    limit: int,
    terms: dict[int, tuple[int, int]],
) -> None:
    rows = [run(n, app, priority, NOW + at) for n, (app, priority, at) in enumerate(specs)]
    line = line_of(rows)
    for n in removed:
        line.remove(f"e{n}")
    left = [r for r in rows if r.id not in removed]
    shares = {app: Share(weight, None, going) for app, (weight, going) in terms.items()}

    def take(row: ExecutionWithJob) -> bool:
        return row.id not in no_slot

    fresh = pick_fair(left, shares, take, limit, AGING)
    kept = pick_from_lines(line.lines(), shares, take, limit, AGING)
    assert [r.id for r in kept] == [r.id for r in fresh]
    # What was not taken is still in line, in the same order, for the next pick.
    rest = [r for r in left if r not in fresh]
    again = pick_from_lines(line.lines(), shares, lambda r: True, len(rest), AGING)
    assert sorted(r.id for r in again) == sorted(r.id for r in rest)
