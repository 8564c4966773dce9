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
from typing import Generic, Protocol, TypeVar

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


class Line(Protocol[Run]):
    """One app's waiting runs in its order, as the fair share takes them."""

    def best(self) -> Run | None:
        """The run that leaves next, or None when none waits."""
        ...

    def pop(self) -> Run:
        """Take the run ``best`` names out of the line."""
        ...

    def push(self, run: Run) -> None:
        """Put back a run taken out of the line, in its place."""
        ...


class SortedLine(Generic[Run]):
    """A ``Line`` over a list sorted once, best at the end."""

    def __init__(self, runs: Iterable[Run], aging_ms: int = AGING_MS) -> None:
        self._runs = sorted(runs, key=lambda r: place(r, aging_ms), reverse=True)

    def best(self) -> Run | None:
        """The run that leaves next, or None."""
        return self._runs[-1] if self._runs else None

    def pop(self) -> Run:
        """Take the best run out."""
        return self._runs.pop()

    def push(self, run: Run) -> None:
        """Put back the run last taken (``_first_taken`` puts back in reverse order)."""
        self._runs.append(run)


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
    lines = {app: SortedLine(runs, aging_ms) for app, runs in by_app.items()}
    return pick_from_lines(lines, shares, take, limit, aging_ms)


def pick_from_lines(
    lines: Mapping[int, Line[Run]],
    shares: Mapping[int, Share],
    take: Callable[[Run], bool],
    limit: int,
    aging_ms: int = AGING_MS,
) -> list[Run]:
    """``pick_fair`` over each app's line as it stands: the runs taken leave their lines,
    so a caller that keeps its lines between picks ranks each run once."""
    running = {app: shares.get(app, Share()).running for app in lines}
    queue = []
    for app, line in lines.items():
        best = line.best()
        if best is not None:
            queue.append((_standing(running[app], shares.get(app)), place(best, aging_ms), app))
    heapq.heapify(queue)
    taken: list[Run] = []
    while queue and len(taken) < limit:
        _, _, app = heapq.heappop(queue)
        share, line = shares.get(app, Share()), lines[app]
        if share.max_running is not None and running[app] >= share.max_running:
            continue
        found = _first_taken(line, take)
        if found is None:
            continue
        taken.append(found)
        running[app] += 1
        best = line.best()
        if best is not None:
            heapq.heappush(queue, (_standing(running[app], share), place(best, aging_ms), app))
    return taken


def _standing(running: int, share: Share | None) -> float:
    """How far the app is into its share: runs going per unit of weight."""
    return running / (share.weight if share is not None else 1)


def _first_taken(line: Line[Run], take: Callable[[Run], bool]) -> Run | None:
    """The first of the app's runs, in its order, that gets a slot, taken out of its
    line; those tried before it go back, in their order."""
    tried: list[Run] = []
    found = None
    while len(tried) < TRIES_PER_APP and (run := line.best()) is not None:
        line.pop()
        if take(run):
            found = run
            break
        tried.append(run)
    for run in reversed(tried):
        line.push(run)
    return found


def in_order(runs: Sequence[Run], aging_ms: int = AGING_MS) -> list[Run]:
    """An app's runs in the order they leave."""
    return sorted(runs, key=lambda r: place(r, aging_ms))
