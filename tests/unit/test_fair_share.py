"""The fair share's pick, on plain values: weights, caps, priorities, aging, handlers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from common.fair_share import AGING_MS, Share, in_order, pick_fair, place


@dataclass(frozen=True)
class Run:
    id: int
    app_pk: int
    priority: int = 5
    scheduled_at: int = 0
    handler: str = "h"


def runs(app: int, count: int) -> list[Run]:
    """``count`` runs of ``app``, due one millisecond apart."""
    return [Run(app * 100_000 + n, app, scheduled_at=n) for n in range(count)]


def slots(count: int, handlers: set[str] | None = None) -> Callable[[Run], bool]:
    """A ``take`` with ``count`` free slots (for runs of ``handlers``, any if None)."""
    left = [count]

    def take(run: Run) -> bool:
        if left[0] <= 0 or (handlers is not None and run.handler not in handlers):
            return False
        left[0] -= 1
        return True

    return take


def test_an_app_with_one_run_is_served_first_whatever_another_has_waiting() -> None:
    flood, quiet = runs(1, 100_000), [Run(7, 2, scheduled_at=10**9)]
    shares = {1: Share(running=16), 2: Share()}
    taken = pick_fair(flood + quiet, shares, slots(1), limit=10)
    assert taken == quiet


def test_free_slots_are_split_by_weight() -> None:
    waiting = runs(1, 100) + runs(2, 100) + runs(3, 100)
    shares = {1: Share(weight=1), 2: Share(weight=2), 3: Share(weight=1)}
    taken = pick_fair(waiting, shares, slots(40), limit=100)
    assert Counter(r.app_pk for r in taken) == {1: 10, 2: 20, 3: 10}


def test_runs_going_count_against_the_share() -> None:
    waiting = runs(1, 50) + runs(2, 50)
    taken = pick_fair(waiting, {1: Share(running=10), 2: Share()}, slots(14), limit=100)
    # app 2 catches up to 10 first, then they alternate: 12 + 2.
    assert Counter(r.app_pk for r in taken) == {2: 12, 1: 2}


def test_an_app_at_its_cap_takes_nothing_and_leaves_the_slot_to_others() -> None:
    waiting = runs(1, 50) + runs(2, 50)
    shares = {1: Share(weight=5, max_running=3, running=1), 2: Share()}
    taken = pick_fair(waiting, shares, slots(10), limit=100)
    assert Counter(r.app_pk for r in taken) == {1: 2, 2: 8}


def test_an_apps_runs_leave_by_priority_then_due_time() -> None:
    low = [Run(1, 1, priority=1, scheduled_at=0), Run(2, 1, priority=1, scheduled_at=1)]
    high = [Run(3, 1, priority=9, scheduled_at=5_000), Run(4, 1, priority=9, scheduled_at=6_000)]
    taken = pick_fair(low + high, {}, slots(4), limit=4)
    assert [r.id for r in taken] == [3, 4, 1, 2]


def test_waiting_runs_gain_priority_with_age_so_nothing_starves() -> None:
    old_low = Run(1, 1, priority=0, scheduled_at=0)
    fresh_high = Run(2, 1, priority=9, scheduled_at=9 * AGING_MS + 1)
    assert [r.id for r in in_order([fresh_high, old_low])] == [1, 2]
    assert place(old_low) < place(fresh_high)


def test_priority_never_takes_another_apps_share() -> None:
    urgent = [Run(n, 1, priority=9, scheduled_at=n) for n in range(50)]
    plain = [Run(1_000 + n, 2, priority=0, scheduled_at=10**6 + n) for n in range(50)]
    taken = pick_fair(urgent + plain, {}, slots(10), limit=10)
    assert Counter(r.app_pk for r in taken) == {1: 5, 2: 5}


def test_a_run_whose_workers_are_full_does_not_hold_up_its_apps_other_runs() -> None:
    waiting = [Run(1, 1, scheduled_at=0, handler="full"), Run(2, 1, scheduled_at=1)]
    taken = pick_fair(waiting, {}, slots(5, handlers={"h"}), limit=5)
    assert [r.id for r in taken] == [2]


def test_the_limit_bounds_one_pick() -> None:
    assert len(pick_fair(runs(1, 100), {}, slots(100), limit=7)) == 7
    assert pick_fair([], {}, slots(5), limit=5) == []


def test_many_apps_each_get_their_turn_in_round_robin() -> None:
    waiting = [r for app in range(1, 21) for r in runs(app, 30)]
    taken = pick_fair(waiting, {}, slots(60), limit=1_000)
    assert Counter(r.app_pk for r in taken) == {app: 3 for app in range(1, 21)}
    # every app's runs kept their own order
    for app in range(1, 21):
        mine = [r.scheduled_at for r in taken if r.app_pk == app]
        assert mine == sorted(mine)
