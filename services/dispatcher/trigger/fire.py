"""Firing SCHEDULED executions at their time: hold them in a heap, send each when due
into a free slot, the slots shared fairly between apps (``common.fair_share``).

Executions are loaded a short window ahead, so a trigger leaves for its worker within
milliseconds of its time instead of waiting for the next scan. A due execution that
finds no free slot (every worker that runs its handler holds what it can start soon,
``common.slots``) waits here, not in a worker's queue, until its app's turn comes.
The database stays the truth: a fired execution is marked QUEUED in the same
transaction that locked it, and anything not fired (this dispatcher died) is still
SCHEDULED and is loaded again by the next pass of whichever dispatcher leads. What the
rules (``fire_rules``) do not send now is written back in the same transaction:
skipped, cancelled, or held for later. The firer reads and writes through
``FireStore`` (MySQL, or ``MemoryStore`` in unit tests), one per connection it opens.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.broker import Publisher
from common.clock import Clock
from common.db.apps import DEFAULT_POLICY, AppPolicy
from common.db.executions_with_job import ExecutionWithJob
from common.db.fire_store import FireStore, FireTransactions, MySqlFireTransactions
from common.db.retry import retry_conflicts
from common.fair_share import AGING_MS, Share, pick_from_lines
from common.loadbalance import LiveWorkers, WorkerLoad
from common.metrics import EXECUTIONS_HELD, TRIGGERS_SKIPPED, observe_dispatched
from common.started_marks import RECALLED, StartedMarks
from common.states import ExecutionStatus
from common.stores import Stores
from common.tracing.spans import NO_TRACING, Tracing
from services.dispatcher.routing.dispatch import Assignment, pack_dispatches, send_packs
from services.dispatcher.routing.route import Router
from services.dispatcher.trigger.fire_dependencies import settle_dependencies
from services.dispatcher.trigger.fire_rules import (
    FireDecisions,
    decide,
    forbid_candidates,
    may_have_held,
    needs_slot,
    no_worker_reason,
    release_on_skip,
)
from services.dispatcher.trigger.fire_wake import wake_children_of_unsent
from services.dispatcher.trigger.waiting_runs import WaitingRuns

log = logging.getLogger(__name__)

# How long before a due time the firer refreshes its view of the workers: the refresh
# (a heartbeat query and a queue check per worker) takes milliseconds, paid at the due
# time otherwise.
WARM_UP_MS = 100
# How long an execution that cannot be sent now (no live worker runs its handler, its
# job is paused) waits before the firer looks at it again. It is written back with its
# ``scheduled_at`` moved on, so the executions due after it are loaded and sent.
HOLD_MS = 5_000
# How many claim batches of one app's due runs the firer holds at most: enough that a
# backlog is read again once per few batches fired, bounded so that apps with huge
# backlogs hold a bounded memory.
HELD_BATCHES = 4
# While no worker has room, how often the firer still passes over what waits.
RECHECK_MS = 1_000


@dataclass(frozen=True)
class FireSettings:
    """How far ahead executions are loaded, how many are read and fired at once, and how
    long one that cannot be sent now waits before it is looked at again."""

    window_ms: int
    batch_size: int
    fire_batch_size: int = 2_000
    hold_ms: int = HOLD_MS
    aging_ms: int = AGING_MS


@dataclass(frozen=True)
class Route:
    """A due execution chosen to go now, with the worker whose slot it took (None: it
    needs none, or no live worker runs its handler)."""

    row: ExecutionWithJob
    assignment: Assignment | None


@dataclass(frozen=True)
class Prepared:
    """The runs due at one instant, chosen ahead of it: ``routes`` go at ``due``, and
    ``rest`` (no slot was free for them) is chosen again with what else is due then."""

    due: int
    routes: list[Route]
    rest: list[ExecutionWithJob]
    # The worker view the choice counted its picks on.
    live: list[WorkerLoad]

    def reread(self, held: Mapping[str, ExecutionWithJob]) -> Prepared:
        """The choice kept for the runs a load read again still due at the instant, each
        as read now (its job's state may have changed); the others are left out, so the
        load's heap holds them."""
        routes = []
        for route in self.routes:
            row = held.get(route.row.execution_id)
            if row is not None and row.scheduled_at == self.due:
                assignment = route.assignment
                if assignment is not None:
                    assignment = Assignment.of(row, assignment.worker_id)
                routes.append(Route(row, assignment))
        rest = [held[r.execution_id] for r in self.rest if r.execution_id in held]
        rest = [r for r in rest if r.scheduled_at == self.due]
        return Prepared(self.due, routes, rest, self.live)

    def execution_ids(self) -> set[str]:
        """The runs this choice holds."""
        return {r.row.execution_id for r in self.routes} | {r.execution_id for r in self.rest}


class Firer:
    """Holds the executions due soon and fires them at their ``scheduled_at``."""

    def __init__(
        self,
        transactions: FireTransactions,
        clock: Clock,
        publisher: Publisher,
        router: Router[LiveWorkers],
        settings: FireSettings,
        tracing: Tracing = NO_TRACING,
        marks: StartedMarks | None = None,
    ) -> None:
        self._transactions = transactions
        # Lifts the fence of runs recalled from a worker's queue as they go again (None:
        # nothing here is ever recalled).
        self._marks = marks
        self._tracing = tracing
        self._clock = clock
        self._publisher = publisher
        self._router = router
        self._window_ms = settings.window_ms
        self._batch_size = settings.batch_size
        self._fire_batch_size = settings.fire_batch_size
        self._per_app = settings.batch_size * HELD_BATCHES
        self._hold_ms = settings.hold_ms
        self._aging_ms = settings.aging_ms
        self._heap: list[tuple[int, str]] = []
        self._held: dict[str, ExecutionWithJob] = {}
        # Due executions that wait for a slot, each app's in its order.
        self._waiting = WaitingRuns(self._aging_ms)
        # Keys marked ``SLOT_WAIT`` by this firer (the rows read before say so too).
        self._marked: set[int] = set()
        self._scarce = False
        self._apps: dict[int, AppPolicy] = {}
        self._running: dict[int, int] = {}
        # Apps with more SCHEDULED executions in the store than are held: a load reads
        # their next ones once what is held of them runs low.
        self._more: set[int] = set()
        self._recheck_at = 0
        # The runs due at the next instant, chosen during the warm-up (``prepare``).
        self._prepared: Prepared | None = None

    @classmethod
    def on_stores(
        cls,
        stores: Stores,
        publisher: Publisher,
        router: Router[LiveWorkers],
        settings: FireSettings,
        tracing: Tracing = NO_TRACING,
    ) -> Firer:
        """The dispatcher's firer: on MySQL (``stores.engine``) and the cluster clock.
        Unit tests build one on ``MemoryStore`` and a clock of their own instead."""
        return cls(
            MySqlFireTransactions(stores.engine),
            stores.clock,
            publisher,
            router,
            settings,
            tracing,
            stores.started_marks(),
        )

    def load(self) -> int:
        """Read SCHEDULED executions due within the window; returns how many were new.

        Each app's first ``HELD_BATCHES`` batches (in its own order) are read, so one
        app's backlog never keeps another's due runs out of what is held. What is held
        is replaced by what is read: a run that ended, moved or was held meanwhile
        leaves, and the rest carry their job's state as it is now. The apps' policies
        and runs going are read with them.
        """
        now = self._clock.now_ms()
        with self._transactions.reading() as store:
            rows = store.scheduled_until(now + self._window_ms, self._per_app, self._aging_ms)
            self._apps = store.app_policies()
            self._running = store.running_by_app()
        new = sum(1 for r in rows if r.execution_id not in self._held)
        self._held = {r.execution_id: r for r in rows}
        # A choice made ahead keeps its picks (counted on the worker view) for the runs
        # still due at its instant.
        prepared: set[str] = set()
        if self._prepared is not None:
            self._prepared = self._prepared.reread(self._held)
            prepared = self._prepared.execution_ids()
            for route in self._prepared.routes:
                if route.assignment is not None:
                    app = route.row.app_pk
                    self._running[app] = self._running.get(app, 0) + 1
        self._heap = [
            (int(r.scheduled_at), r.execution_id) for r in rows if r.execution_id not in prepared
        ]
        heapq.heapify(self._heap)
        # The due ones come back from the heap at the next fire, as read now.
        self._waiting = WaitingRuns(self._aging_ms)
        self._marked &= {r.id for r in rows}
        counts = self._held_by_app()
        self._more = {app for app, n in counts.items() if n >= self._per_app}
        return new

    def add(self, rows: Sequence[ExecutionWithJob]) -> int:
        """Hold these executions, which a claim has just written SCHEDULED, as the claim
        built them (``claim_rows``) rather than by a load: a load ranks everything that
        waits, and claims come back to back while there is a backlog. Returns how many
        are newly held; those due after the window are left to a load.

        An app holds no more than a load would hold of it; what is beyond that waits
        for a load (``needs_load``), which reads each app's next runs in its order.
        """
        until = self._clock.now_ms() + self._window_ms
        counts = self._held_by_app()
        added = 0
        for row in rows:
            if row.execution_id in self._held or row.scheduled_at > until:
                continue
            if counts.get(row.app_pk, 0) >= self._per_app:
                self._more.add(row.app_pk)
                continue
            counts[row.app_pk] = counts.get(row.app_pk, 0) + 1
            self._held[row.execution_id] = row
            heapq.heappush(self._heap, (int(row.scheduled_at), row.execution_id))
            added += 1
        if added:
            # Read again with the runs: an operator's cap, fence or disable set a moment
            # before the jobs were submitted holds for their first runs too, rather than
            # from the next load on.
            with self._transactions.reading() as store:
                self._apps = store.app_policies()
        return added

    def needs_load(self) -> bool:
        """Whether an app with more runs in the store than held has a batch or less
        left held."""
        if not self._more:
            return False
        counts = self._held_by_app()
        return any(counts.get(app, 0) <= self._batch_size for app in self._more)

    def _held_by_app(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for row in self._held.values():
            counts[row.app_pk] = counts.get(row.app_pk, 0) + 1
        return counts

    def waiting(self) -> int:
        """How many due executions wait to be sent (for a free slot, or the next fire)."""
        return len(self._waiting)

    def claims_hold_off(self) -> bool:
        """Whether claims must send nothing, leaving every run to the firer: the last
        fire left due executions without a slot (or over their app's cap), so the fair
        share alone may say who goes next; or the warm-up has chosen the next instant's
        runs, on a worker view whose reload (before the instant) does not count them, so
        a claim's sends on the reloaded view could fill the same room twice."""
        return (self._scarce and bool(self._waiting)) or self._prepared is not None

    def next_due(self) -> int | None:
        """When the earliest held execution is due."""
        heap_due = self._heap[0][0] if self._heap else None
        if self._prepared is None:
            return heap_due
        return self._prepared.due if heap_due is None else min(heap_due, self._prepared.due)

    def newly_due(self) -> bool:
        """Whether a held execution, or the warm-up's choice, has come due and not yet
        been fired or found waiting."""
        due = self.next_due()
        return due is not None and due <= self._clock.now_ms()

    def next_wake(self) -> int | None:
        """When the dispatch loop should next call: ``warm_up`` or ``fire_due`` is due."""
        due = self.next_due()
        if due is None:
            return None
        return due - WARM_UP_MS if due - WARM_UP_MS > self._clock.now_ms() else due

    def warm_up(self) -> None:
        """Refresh the worker view now if it would be stale when the next execution is due."""
        due = self.next_due()
        if due is None:
            return
        ahead_ms = due - self._clock.now_ms()
        if 0 < ahead_ms <= WARM_UP_MS:
            self._router.directory.live(fresh_for=(ahead_ms + WARM_UP_MS) / 1000)
            self._prepare(due)

    def _prepare(self, due: int) -> None:
        """Choose the runs due at ``due`` now, so that at their time they only need to be
        locked, marked and sent: the choice (classifying, routing and ranking them) takes
        milliseconds at a thousand runs, paid at the instant otherwise.

        Only while nothing waits: then everything that contends at the instant is due at
        it, and choosing it ahead is the choice the instant would make (on the worker view
        the warm-up just made fresh until then). What is chosen stays held; a load
        before the instant keeps the choice for what it reads still due then.
        """
        # One choice ahead at a time: an earlier instant that comes meanwhile is chosen at
        # its time.
        if self._waiting or self._prepared is not None:
            return
        rows: list[ExecutionWithJob] = []
        while self._heap and self._heap[0][0] <= due:
            _, execution_id = heapq.heappop(self._heap)
            row = self._held.get(execution_id)
            if row is not None:
                rows.append(row)
        live = self._router.directory.live()
        line = WaitingRuns(self._aging_ms)
        for row in rows:
            line.add(row)
        routes = self._choose(line, live)
        chosen = {route.row.id for route in routes}
        self._prepared = Prepared(due, routes, [r for r in rows if r.id not in chosen], live)

    def fire_due(self) -> int:
        """Send due executions into the free slots, fairly between apps, up to one fire
        batch; returns how many were sent.

        Everything due goes in one transaction and one publish: a second, smaller batch
        due at the same instant would wait for the first one's round trips. What finds
        no slot waits, held here, marked once as waiting (``SLOT_WAIT``). What the
        warm-up chose for the instant (``_prepare``) goes with what came since.
        """
        now = self._clock.now_ms()
        prepared = self._take_prepared(now)
        ahead = prepared.routes if prepared is not None else []
        came = len(ahead)
        while self._heap and self._heap[0][0] <= now:
            _, execution_id = heapq.heappop(self._heap)
            row = self._held.get(execution_id)
            if row is not None:
                self._waiting.add(row)
                came += 1
        if not ahead and (not self._waiting or (not came and self._no_room(now))):
            return 0
        # What came since the warm-up's choice is chosen on the view it counted its picks on.
        live = prepared.live if prepared is not None else None
        room = self._fire_batch_size - len(ahead)
        chosen = ahead + (self._choose(self._waiting, live, room) if room > 0 else [])
        for route in chosen:
            self._waiting.remove(route.row.execution_id)
            self._held.pop(route.row.execution_id, None)
        self._mark_waiting()
        return self._fire(chosen) if chosen else 0

    def _take_prepared(self, now: int) -> Prepared | None:
        """The choice made ahead for an instant now come, with the routes of runs still
        held; what found no slot then is due with the rest."""
        prepared = self._prepared
        if prepared is None or prepared.due > now:
            return None
        self._prepared = None
        for row in prepared.rest:
            if row.execution_id in self._held:
                heapq.heappush(self._heap, (int(row.scheduled_at), row.execution_id))
        routes = [r for r in prepared.routes if r.row.execution_id in self._held]
        return dataclasses.replace(prepared, routes=routes, rest=[])

    def _no_room(self, now: int) -> bool:
        """Whether no live worker has room, so that what waited at the last pass (and
        was settled then, or found no slot) can wait without a pass over all of it:
        with a backlog held, that pass costs the loop more than the firing. Every
        ``RECHECK_MS`` a pass runs anyway (a worker that left, a policy changed)."""
        if now >= self._recheck_at:
            self._recheck_at = now + RECHECK_MS
            return False
        return all(w.room <= 0 for w in self._router.directory.live())

    def _choose(
        self,
        line: WaitingRuns,
        live: list[WorkerLoad] | None = None,
        limit: int | None = None,
    ) -> list[Route]:
        """Which runs of ``line`` (due) go now, ``limit`` (a fire batch) at most: those
        that need no slot (their rules settle them), then those the fair share gives a
        free slot on ``live`` (the directory's view when None), their picks counted
        there. The runs chosen leave ``line``'s app lines; the caller removes them."""
        live = self._router.directory.live() if live is None else live
        limit = self._fire_batch_size if limit is None else limit
        apps = self._apps
        runnable = frozenset(name for w in live for name in w.handlers)

        def contends(row: ExecutionWithJob) -> bool:
            policy = apps.get(row.app_pk, DEFAULT_POLICY)
            return row.handler in runnable and needs_slot(row, policy)

        line.sort((tuple(sorted(apps.items())), runnable), contends)
        routes = [Route(row, None) for row in line.settling()[:limit]]
        assigned: dict[int, Assignment] = {}

        def take(row: ExecutionWithJob) -> bool:
            assignment = self._router.assign(row, live)
            if assignment is not None:
                assigned[row.id] = assignment
            return assignment is not None

        shares = {}
        for app in line.lines():
            policy = apps.get(app, DEFAULT_POLICY)
            shares[app] = Share(policy.weight, policy.max_running, self._running.get(app, 0))
        room = limit - len(routes)
        contending = line.contending()
        picked = pick_from_lines(line.lines(), shares, take, room, self._aging_ms)
        # Short of both what waited and the batch: slots (or an app's cap) ran out.
        self._scarce = len(picked) < min(contending, room)
        for row in picked:
            self._running[row.app_pk] = self._running.get(row.app_pk, 0) + 1
            routes.append(Route(row, assigned[row.id]))
        return routes

    def _mark_waiting(self) -> None:
        """Write ``SLOT_WAIT`` on executions that wait for a slot for the first time.

        The copies held here are not rewritten: the firer's rules read ``_marked`` with
        them, so a run that waited for a slot is no misfire however long it waited
        (``fire_rules``), as a load's read of the mark would tell them.
        """
        unmarked = self._waiting.unmarked()
        first = [r.id for r in unmarked if r.id not in self._marked]
        if first:
            with self._transactions.transaction() as store:
                store.mark_waiting(first)
            self._marked.update(first)
        self._waiting.marked(unmarked)

    @retry_conflicts("fire")
    def _fire(self, chosen: Sequence[Route]) -> int:
        now = self._clock.now_ms()
        with self._transactions.transaction() as store:
            # Passed over, not waited for: an execution another transaction holds (a
            # cancel, which then waits for its job's row) is fired on a later pass, if
            # still SCHEDULED. Waiting could close a circle through an open claim, which
            # only this loop commits, and stall it until MySQL gives up (50 s).
            still = store.lock_still_scheduled([r.row.id for r in chosen], skip_locked=True)
            rows = [r.row for r in chosen if r.row.id in still]
            busy = store.jobs_with_runs(forbid_candidates(rows))
            decisions = decide(rows, now, busy, self._apps, self._marked)
            on_parents = settle_dependencies(store, decisions, now)
            _skip_later_if_job_held(store, rows, decisions)
            assignments, held = self._assign(decisions, {r.row.id: r.assignment for r in chosen})
            self._settle_unsent(store, rows, decisions, held, now)
            held.update(on_parents)
            # Marked before the publish, while the workers are still idle: written after
            # it, the marks would compete for the CPU and the row locks with the runs
            # and results the publish sets off (bench/RESULTS.md).
            store.mark_queued({a.execution_key: a.worker_id for a in assignments}, now)
            self._lift_recall_fences(rows, assignments)
            returned = send_packs(
                store, self._publisher, pack_dispatches(assignments, now, tracing=self._tracing)
            )
        wake_children_of_unsent(self._transactions, rows, decisions, now)
        observe_dispatched(assignments, returned, now)
        self._observe(rows, decisions, held)
        return len(assignments) - len(returned)

    def _lift_recall_fences(
        self, rows: Sequence[ExecutionWithJob], assignments: Sequence[Assignment]
    ) -> None:
        """Lift the fence of the recalled runs about to be sent (a SCHEDULED row with a
        ``dispatched_at`` was taken back from a worker's queue, ``upkeep.recall``), so
        that the copy sent now may take the started key. Whichever copy takes it first,
        this one or one still in the old queue, runs; the other is dropped."""
        sent = {a.execution_key for a in assignments}
        recalled = [r.execution_id for r in rows if r.dispatched_at is not None and r.id in sent]
        if recalled and self._marks is not None:
            self._marks.release_runs(recalled, RECALLED)

    def _assign(
        self, decisions: FireDecisions, chosen: dict[int, Assignment | None]
    ) -> tuple[list[Assignment], dict[int, str]]:
        """The assignments of what is to be sent; what has none (no live worker runs its
        handler) is held, with why."""
        assignments: list[Assignment] = []
        held = dict(decisions.held)
        for row in decisions.to_send:
            assignment = chosen.get(row.id)
            if assignment is None:
                held[row.id] = no_worker_reason(row.handler)
            else:
                assignments.append(assignment)
        return assignments, held

    def _settle_unsent(
        self,
        store: FireStore,
        rows: Sequence[ExecutionWithJob],
        decisions: FireDecisions,
        held: dict[int, str],
        now: int,
    ) -> None:
        """Write what is not sent: cancelled, skipped (their job released as a finished
        run releases it, if anything holds it) and held (looked at again after
        ``hold_ms``)."""
        store.mark_skipped(decisions.cancelled, now, ExecutionStatus.CANCELLED)
        store.mark_skipped(decisions.skipped, now)
        skipped = [r for r in rows if r.id in decisions.skipped and may_have_held(r)]
        # Read after the skips are written: a job with no own run left was held by one.
        busy = store.jobs_with_own_runs([r.job_id for r in skipped])
        ends = [release_on_skip(r, alone=r.job_id not in busy) for r in skipped]
        store.release_jobs([end for end in ends if end is not None], now)
        store.hold_scheduled(held, now + self._hold_ms)

    @staticmethod
    def _observe(
        rows: Sequence[ExecutionWithJob], decisions: FireDecisions, held: dict[int, str]
    ) -> None:
        TRIGGERS_SKIPPED.labels(stage="fire").inc(len(decisions.skipped))
        EXECUTIONS_HELD.inc(len(held))
        for row in rows:
            why = decisions.skipped.get(row.id) or held.get(row.id)
            if why is not None:
                log.info(why, extra={"job_id": row.job_id, "execution_id": row.execution_id})


def _skip_later_if_job_held(
    store: FireStore, rows: Sequence[ExecutionWithJob], decisions: FireDecisions
) -> None:
    """Leave SCHEDULED, for a later pass, a skip whose job row another transaction holds.

    Skipping releases the job, which waits for its row: held by an open claim (of this
    loop, or of a paused dispatcher) it could stall the loop until MySQL gives up.
    """
    ends = {r.id: release_on_skip(r, alone=True) for r in rows if r.id in decisions.skipped}
    jobs = {end[0] for end in ends.values() if end is not None}
    free = store.lock_free_jobs(jobs)
    for execution_key, end in ends.items():
        if end is not None and end[0] not in free:
            del decisions.skipped[execution_key]
