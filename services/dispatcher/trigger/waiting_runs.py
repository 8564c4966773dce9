"""The due runs the firer holds until they are sent, each app's in its own order, so that
a pass takes the next runs without ranking every run that waits.

With a backlog held, a pass classified and ranked every waiting run (thousands) to send
the few that finished runs had made room for. Here a run takes its place in its app's
line once, when it comes due; the lines are built again only when what sorts the runs
into them changes: the apps' policies, or the handlers the live workers run.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator

from common.db.executions_with_job import ExecutionWithJob
from common.fair_share import AGING_MS, place

Place = tuple[int, int]


class _HeapLine:
    """One app's runs that contend for a slot, best first; an entry whose run has left
    (or came back under a newer entry) is passed over where it surfaces."""

    def __init__(self, owner: WaitingRuns) -> None:
        self._owner = owner
        self._heap: list[tuple[Place, int, str]] = []

    def add(self, row: ExecutionWithJob, entry: int) -> None:
        heapq.heappush(self._heap, (self._owner.place(row), entry, row.execution_id))

    def best(self) -> ExecutionWithJob | None:
        """The run that leaves next, or None."""
        while self._heap:
            _, entry, execution_id = self._heap[0]
            row = self._owner.current(execution_id, entry)
            if row is not None:
                return row
            heapq.heappop(self._heap)
        return None

    def pop(self) -> ExecutionWithJob:
        """Take the best run out of the line (it stays waiting until the firer sends it)."""
        row = self.best()
        assert row is not None
        heapq.heappop(self._heap)
        return row

    def push(self, row: ExecutionWithJob) -> None:
        """Put back a run taken out and not sent."""
        self.add(row, self._owner.entry(row.execution_id))


class WaitingRuns:
    """Due runs by execution id; those that contend for a slot in their app's line, the
    rest (their rules settle them without one) apart."""

    def __init__(self, aging_ms: int = AGING_MS) -> None:
        self._aging_ms = aging_ms
        self._rows: dict[str, ExecutionWithJob] = {}
        self._entries: dict[str, int] = {}
        self._next_entry = 0
        self._settle: dict[str, ExecutionWithJob] = {}
        self._lines: dict[int, _HeapLine] = {}
        self._unmarked: set[str] = set()
        self._sorted_by: Hashable = None
        self._contends: Callable[[ExecutionWithJob], bool] = lambda row: True

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[ExecutionWithJob]:
        return iter(self._rows.values())

    def place(self, row: ExecutionWithJob) -> Place:
        """The run's place in its app's order (``fair_share.place``)."""
        return place(row, self._aging_ms)

    def current(self, execution_id: str, entry: int) -> ExecutionWithJob | None:
        """The run a line's entry stands for, if it still waits under that entry."""
        if self._entries.get(execution_id) != entry:
            return None
        return self._rows[execution_id]

    def entry(self, execution_id: str) -> int:
        """The entry the waiting run holds in its line."""
        return self._entries[execution_id]

    def add(self, row: ExecutionWithJob) -> None:
        """A run came due (or is held again, as read anew)."""
        execution_id = row.execution_id
        self._rows[execution_id] = row
        self._settle.pop(execution_id, None)
        self._entries[execution_id] = entry = self._next_entry
        self._next_entry += 1
        if not row.waited:
            self._unmarked.add(execution_id)
        if self._sorted_by is not None:
            self._sort_one(row, entry)

    def remove(self, execution_id: str) -> None:
        """The run leaves (sent, settled, or read again by a load)."""
        self._rows.pop(execution_id, None)
        self._entries.pop(execution_id, None)
        self._settle.pop(execution_id, None)
        self._unmarked.discard(execution_id)

    def marked(self, rows: Iterable[ExecutionWithJob]) -> None:
        """These runs have been said to wait for a slot."""
        self._unmarked.difference_update(row.execution_id for row in rows)

    def unmarked(self) -> list[ExecutionWithJob]:
        """The runs not yet said to wait for a slot (until ``marked``)."""
        self._unmarked &= self._rows.keys()
        return [self._rows[e] for e in self._unmarked]

    def sort(self, by: Hashable, contends: Callable[[ExecutionWithJob], bool]) -> None:
        """Sort the runs into settling ones and each app's line by ``contends``, unless
        they already are by the same terms ``by`` (compared by value)."""
        if by == self._sorted_by:
            return
        self._sorted_by, self._contends = by, contends
        self._settle, self._lines = {}, {}
        for execution_id, row in self._rows.items():
            self._sort_one(row, self._entries[execution_id])

    def _sort_one(self, row: ExecutionWithJob, entry: int) -> None:
        if self._contends(row):
            line = self._lines.get(row.app_pk)
            if line is None:
                line = self._lines[row.app_pk] = _HeapLine(self)
            line.add(row, entry)
        else:
            self._settle[row.execution_id] = row

    def settling(self) -> list[ExecutionWithJob]:
        """The runs that need no slot (their rules settle them), as sorted last."""
        return list(self._settle.values())

    def lines(self) -> dict[int, _HeapLine]:
        """Each app's line of runs that contend for a slot, as sorted last."""
        return self._lines

    def contending(self) -> int:
        """How many runs contend for a slot."""
        return len(self._rows) - len(self._settle)
