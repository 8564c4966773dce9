"""The fair share: which waiting run takes the next free slot.

Apps share the slots by weight. The next slot goes to the app furthest below its share,
the one with the fewest runs going for its weight (``running / weight``), among the apps
with a run waiting that are under their cap (``max_running``); ties go to the app whose
best run has waited longest. Inside an app, runs leave by priority and due time, with
aging: a run's place is ``scheduled_at - priority * aging_ms``, so a run of priority p
waits at most ``(9 - p) * aging_ms`` longer than a run of priority 9 due with it, and
nothing starves. Priority orders an app's own runs only; it never takes another app's
share. Pure logic over plain values, so every case is unit-tested without servers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

# How much waiting is worth one priority step.
AGING_MS = 60_000
# How many of one app's waiting runs are tried, in its order, when the ones before them
# find no slot (their handler's workers are full) before the app is passed over.
TRIES_PER_APP = 50


class Waiting(Protocol):
    """A run waiting for a slot, as far as the fair share reads it."""

    @property
    def id(self) -> int: ...
    @property
    def app_pk(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def scheduled_at(self) -> int: ...


Run = TypeVar("Run", bound=Waiting)


@dataclass(frozen=True)
class Share:
    """An app's standing in the share: its weight, its cap and its runs going now."""

    weight: int = 1
    max_running: int | None = None
    running: int = 0


def place(run: Waiting, aging_ms: int = AGING_MS) -> tuple[int, int]:
    """A run's place in its app's order: smaller leaves first."""
    return run.scheduled_at - run.priority * aging_ms, run.id


def pick_fair(
    waiting: Iterable[Run],
    shares: Mapping[int, Share],
    take: Callable[[Run], bool],
    limit: int,
    aging_ms: int = AGING_MS,
) -> list[Run]:
    """The runs that take free slots, in the order they took them, at most ``limit``.

    ``take(run)`` claims a slot for the run (a worker that runs its handler and has
    room) and says whether it got one. An app at its cap takes nothing; one whose next
    ``TRIES_PER_APP`` runs all found no slot is passed over for this pick.
    """
    by_app: dict[int, list[Run]] = {}
    for run in waiting:
        by_app.setdefault(run.app_pk, []).append(run)
    running = {app: shares.get(app, Share()).running for app in by_app}
    queue = []
    for app, runs in by_app.items():
        runs.sort(key=lambda r: place(r, aging_ms), reverse=True)  # the best at the end
        queue.append((_standing(running[app], shares.get(app)), place(runs[-1], aging_ms), app))
    heapq.heapify(queue)
    taken: list[Run] = []
    while queue and len(taken) < limit:
        _, _, app = heapq.heappop(queue)
        share, runs = shares.get(app, Share()), by_app[app]
        if share.max_running is not None and running[app] >= share.max_running:
            continue
        found = _first_taken(runs, take)
        if found is None:
            continue
        taken.append(found)
        running[app] += 1
        if runs:
            standing = _standing(running[app], share)
            heapq.heappush(queue, (standing, place(runs[-1], aging_ms), app))
    return taken


def _standing(running: int, share: Share | None) -> float:
    """How far the app is into its share: runs going per unit of weight."""
    return running / (share.weight if share is not None else 1)


def _first_taken(runs: list[Run], take: Callable[[Run], bool]) -> Run | None:
    """The first of the app's runs (best at the end of ``runs``) that gets a slot, taken
    out of ``runs``; those tried before it stay, in their order."""
    tried: list[Run] = []
    found = None
    while runs and len(tried) < TRIES_PER_APP:
        run = runs.pop()
        if take(run):
            found = run
            break
        tried.append(run)
    runs.extend(reversed(tried))
    return found


def in_order(runs: Sequence[Run], aging_ms: int = AGING_MS) -> list[Run]:
    """An app's runs in the order they leave."""
    return sorted(runs, key=lambda r: place(r, aging_ms))
