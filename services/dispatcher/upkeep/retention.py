"""Retention: history past its age is deleted in batches sized to keep up with any rate.

The leader runs it in a thread of its own (``RetentionLoop``), off the dispatch loop,
whose firing it would otherwise delay; nothing else prunes. Each pass deletes batch
after batch while batches come back full and its time budget lasts; a batch that was
quick makes the next one twice as big, a slow one halves it. A backlog (a raised
rate, a retention shortened) is worked off back to back at whatever rate the database
allows, and a quiet table costs one short query per kind of row a second. A lock
conflict runs the pass again in place, counted under stage ``retention``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Connection, Engine

from common.alerts.state_rows import prune_alert_states
from common.clock import ClusterClock
from common.db.audit import prune_audit
from common.db.delivery_store import MySqlDeliveryStore
from common.db.retention import prune_executions, prune_jobs
from common.db.retry import ConflictRetry
from common.db.workers import WorkerTransactions
from common.runtime import backoff_seconds
from services.dispatcher.upkeep.gauges import forget_worker_series

log = logging.getLogger(__name__)

FIRST_BATCH = 1_000
MIN_BATCH = 100
MAX_BATCH = 20_000
# A batch that took less than this grows; one that took more than twice this shrinks.
BATCH_TARGET_S = 0.05
# What one pass may spend deleting before it looks again whether it still leads.
BUDGET_S = 1.0
# How long the loop rests after a pass that caught up.
IDLE_S = 1.0
WORKERS_PER_CALL = 100
# The stage a pass's lock conflicts are counted under (``kairos_store_conflicts_total``).
STAGE = "retention"

Pruner = Callable[[Connection, int, int], int]


@dataclass
class BatchSize:
    """The batch size for the next delete, adapted to how long the last one took."""

    rows: int = FIRST_BATCH
    behind: bool = False
    """A batch stopped by the time budget came back full: more is due now."""
    target_s: float = BATCH_TARGET_S
    """A full batch quicker than this grows; one slower than twice this shrinks."""

    def adapt(self, full: bool, took_s: float) -> None:
        """Grow after a quick full batch, shrink after a slow one."""
        self.behind = full
        if took_s > 2 * self.target_s:
            self.rows = max(MIN_BATCH, self.rows // 2)
        elif full and took_s < self.target_s:
            self.rows = min(MAX_BATCH, self.rows * 2)


def prune(
    engine: Engine,
    workers: WorkerTransactions,
    clock: ClusterClock,
    retention_ms: int,
    budget_s: float = BUDGET_S,
    size: BatchSize | None = None,
) -> int:
    """Delete history past the retention period (if one is set) within ``budget_s``;
    returns how many rows went. Executions and deliveries go before jobs, which go only
    once their history has; forgotten workers go through ``workers``."""
    if retention_ms <= 0:
        return 0
    size = size or BatchSize()
    cutoff = clock.now_ms() - retention_ms
    deadline = time.monotonic() + budget_s
    gone, behind = 0, False
    pruners = (prune_executions, prune_deliveries, prune_jobs, prune_audit, prune_alert_states)
    for pruner in pruners:
        gone += _catch_up(engine, pruner, cutoff, deadline, size)
        behind = behind or size.behind
    size.behind = behind
    gone += _prune_workers(workers, cutoff)
    if gone:
        log.info("retention: deleted %d rows past %d days", gone, retention_ms // 86_400_000)
    return gone


def prune_deliveries(conn: Connection, before_ms: int, limit: int) -> int:
    """The deliveries aggregate's prune (``DeliveryStore.prune_settled``) as a ``Pruner``."""
    return MySqlDeliveryStore(conn).prune_settled(before_ms, limit)


def _catch_up(engine: Engine, pruner: Pruner, cutoff: int, deadline: float, size: BatchSize) -> int:
    """Batches of one kind of row until one comes back short or the time is up."""
    gone = 0
    while True:
        began = time.monotonic()
        with engine.begin() as conn:
            deleted = pruner(conn, cutoff, size.rows)
        full = deleted >= size.rows
        size.adapt(full, time.monotonic() - began)
        gone += deleted
        if not full or time.monotonic() >= deadline:
            return gone


def _prune_workers(workers: WorkerTransactions, cutoff: int) -> int:
    with workers.transaction() as store:
        gone = store.prune_forgotten(cutoff, WORKERS_PER_CALL)
    forget_worker_series(gone)
    return len(gone)


class RetentionLoop:
    """Prunes in a thread of its own while this dispatcher leads: back to back while a
    backlog lasts, once every ``IDLE_S`` after it caught up."""

    def __init__(
        self, engine: Engine, workers: WorkerTransactions, clock: ClusterClock, retention_ms: int
    ) -> None:
        self._engine = engine
        self._workers = workers
        self._clock = clock
        self._retention_ms = retention_ms
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, keep_going: Callable[[], bool]) -> None:
        """Prune in the background for as long as ``keep_going()`` says (if a retention
        period is set)."""
        if self._retention_ms <= 0:
            return
        self._wake.clear()
        self._thread = threading.Thread(
            target=self._run, args=(keep_going,), name="retention", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float = 30.0) -> bool:
        """Wait up to ``timeout`` seconds for the thread to notice it should stop; True
        once it has (or never ran), False while it is still in a pass."""
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        self._wake.set()
        thread.join(timeout=timeout)
        return not thread.is_alive()

    def _run(self, keep_going: Callable[[], bool]) -> None:
        size, failures = BatchSize(), 0
        while keep_going():
            try:
                self._prune(size)
                caught_up, failures = not size.behind, 0
            except Exception as e:
                failures += 1
                log.warning("retention failed (%r); trying again", e)
                caught_up = True
            if caught_up:
                self._wake.wait(IDLE_S if not failures else backoff_seconds(failures))

    def _prune(self, size: BatchSize) -> None:
        """One pass; run again in place after a lock conflict, which is counted, as every
        stage does (``common.db.retry``): a conflict is no failure to back off from."""
        ConflictRetry(STAGE).run(
            prune, self._engine, self._workers, self._clock, self._retention_ms, size=size
        )
