"""Recalling runs a worker's queue holds beyond what it can start soon.

The firer sends a worker no more than it starts within the slot horizon
(``common.slots``), pricing each run by its handler's time as the worker last reported
it. When a handler grows slow, the runs already queued at the old price stay in the
worker's queue, first in, first out, where the fair share cannot reach them: a flood of
a quick handler that turns slow would hold every other app's runs for minutes. So once a
pass finds a worker's queue worth far more than its bound at today's prices (more than
``factor`` times), the leader takes back the runs at its end that no worker has taken,
down to the bound, and the firer shares them out again.

Taking one back: its started key is fenced (``RECALLED``: the copy left in the worker's
queue is dropped when reached, cheaply, and a run the worker has already taken is not
recalled); then, in a short transaction, its row is locked while still QUEUED on the
worker (held rows are passed over, and their fences lifted) and goes back to SCHEDULED,
keeping its due time and ``dispatched_at`` (which tells the firer to lift the fence just
before it sends it again). Whichever copy then takes the started key runs; the other is
dropped. A leader that dies between the fence and the commit leaves a QUEUED row with a
recalled fence: the reconciler finishes that recall.

The queue is priced again on the way (``WorkerDirectory.repriced``), so the firer fills
it by today's prices rather than refilling what was just taken back. A queue is read
only when it may be overfull and a handler's cost on its worker has risen past the
factor since it was last counted (or this leader never counted it): a steady cluster
reads nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from common.db.executions_with_job import SLOT_WAIT, ExecutionWithJob
from common.db.rescue_store import RescueTransactions
from common.loadbalance import UNBOUNDED, LiveWorkers, WorkerLoad
from common.metrics import EXECUTIONS_RECALLED
from common.started_marks import RECALLED, StartedMarks

log = logging.getLogger(__name__)

# Recall only when a queue is worth this many times its bound: below it, what is queued
# starts within a few horizons, and a recall would only move runs back and forth.
RECALL_FACTOR = 2.0
# The most of a worker's queue one pass reads (the end of it, the last sent first).
READ_LIMIT = 5_000


@dataclass(frozen=True)
class RecallSettings:
    """When a queue is recalled (``factor`` times its bound), how much of it one pass
    reads, and how long a recalled run's fence keeps a late copy from running."""

    fence_ttl_seconds: int
    factor: float = RECALL_FACTOR
    read_limit: int = READ_LIMIT


@dataclass(frozen=True)
class RecallPlan:
    """A worker's queue priced at today's prices: the places it takes, the time beyond a
    place each, and the runs at its end to take back (the last sent first)."""

    places: int
    extra_ms: float
    take_back: list[ExecutionWithJob] = field(default_factory=list)


def plan_recall(
    rows: Sequence[ExecutionWithJob], load: WorkerLoad, factor: float = RECALL_FACTOR
) -> RecallPlan:
    """Price ``rows`` (QUEUED on the worker of ``load``, the last sent first) by the
    worker's costs per handler; when they take more than ``factor`` times its bound,
    the last sent, enough of them to bring it back to the bound."""
    costs = [load.costs.get(row.handler, 1) for row in rows]
    places = sum(costs)
    extra_ms = sum(c - 1 for c in costs) * load.unit_ms
    if load.bound >= UNBOUNDED or places <= factor * load.bound:
        return RecallPlan(places, extra_ms)
    surplus = places - load.bound
    take_back: list[ExecutionWithJob] = []
    for row, cost in zip(rows, costs, strict=True):
        if surplus <= 0:
            break
        take_back.append(row)
        surplus -= cost
    return RecallPlan(places, extra_ms, take_back)


def may_be_overfull(load: WorkerLoad) -> bool:
    """Whether the worker's queue could be worth more than its bound at today's prices."""
    if load.bound >= UNBOUNDED or not load.costs:
        return False
    return load.queued * max(load.costs.values()) > load.bound


def prices_rose(
    load: WorkerLoad, counted: Mapping[str, int] | None, factor: float = RECALL_FACTOR
) -> bool:
    """Whether a handler's cost on the worker is ``factor`` times what it was when its
    queue was last counted (``counted``; None: never counted by this leader). Below
    that, the queue holds at most ``factor`` times its bound, as counted."""
    if counted is None:
        return True
    return any(cost >= factor * counted.get(h, 1) for h, cost in load.costs.items())


class QueueView(LiveWorkers, Protocol):
    """What the recall needs of the worker view: the live workers, and counting a
    worker's queue afresh (``WorkerDirectory``)."""

    def repriced(self, worker_id: str, queued: int, extra_ms: float, recalled: int) -> None:
        """Count the worker's queue as the recall found it."""
        ...


class Recall:
    """Takes back the unstarted runs at the end of overfull queues; safe to repeat."""

    def __init__(
        self,
        transactions: RescueTransactions,
        marks: StartedMarks,
        view: QueueView,
        settings: RecallSettings,
    ) -> None:
        self._transactions = transactions
        self._marks = marks
        self._view = view
        self._settings = settings
        # Each worker's costs per handler when its queue was last counted: it is read
        # again only once one of them has risen past the recall's factor, so a steady
        # cluster reads nothing.
        self._counted: dict[str, dict[str, int]] = {}

    def recall_surplus(self) -> int:
        """One pass over the live workers; how many runs it took back."""
        recalled = 0
        live = self._view.live()
        for load in live:
            counted = self._counted.get(load.worker_id)
            if may_be_overfull(load) and prices_rose(load, counted, self._settings.factor):
                recalled += self._recall_from(load)
                self._counted[load.worker_id] = dict(load.costs)
        workers = {load.worker_id for load in live}
        self._counted = {w: c for w, c in self._counted.items() if w in workers}
        return recalled

    def _recall_from(self, load: WorkerLoad) -> int:
        worker_id = load.worker_id
        with self._transactions.reading() as store:
            rows = store.newest_queued_on(worker_id, self._settings.read_limit)
        plan = plan_recall(rows, load, self._settings.factor)
        taken = self._take_back(worker_id, plan.take_back) if plan.take_back else []
        gone_ms = sum(load.costs.get(r.handler, 1) - 1 for r in taken) * load.unit_ms
        left = max(load.queued, len(rows)) - len(taken)
        self._view.repriced(worker_id, left, max(0.0, plan.extra_ms - gone_ms), len(taken))
        if taken:
            EXECUTIONS_RECALLED.inc(len(taken))
            log.info(
                "worker %s held %d places of runs against a bound of %d: %d unstarted runs "
                "taken back to wait for a slot",
                worker_id,
                plan.places,
                load.bound,
                len(taken),
                extra={"worker_id": worker_id},
            )
        return len(taken)

    def _take_back(
        self, worker_id: str, rows: Sequence[ExecutionWithJob]
    ) -> list[ExecutionWithJob]:
        """Fence, then give back to the firer, those of ``rows`` no worker has taken and
        still QUEUED on the worker; those. The fences come first, outside the
        transaction: a run the worker takes meanwhile is not recalled, and its result
        never waits for a row the recall holds."""
        fenced = self._marks.fence(
            [r.execution_id for r in rows], RECALLED, self._settings.fence_ttl_seconds
        )
        free = [r for r, ok in zip(rows, fenced, strict=True) if ok]
        taken: list[ExecutionWithJob] = []
        try:
            with self._transactions.transaction() as store:
                locked = store.lock_queued_on([r.execution_id for r in free], worker_id)
                taken = [r for r in free if r.execution_id in locked]
                store.recall([r.execution_id for r in taken], worker_id, SLOT_WAIT)
        finally:
            # Those not moved (another transaction holds them, they left the worker, or
            # the commit failed) go on as they were. Should this fail, the reconciler
            # finishes those left QUEUED.
            kept = {r.execution_id for r in taken}
            self._marks.release_runs(
                [r.execution_id for r in free if r.execution_id not in kept], RECALLED
            )
        return taken
