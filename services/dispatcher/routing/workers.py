"""The dispatcher's view of live workers and their load."""

from __future__ import annotations

import logging
import math
import time

from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from common.clock import ClusterClock
from common.db.workers import WorkerRecord, WorkerTransactions
from common.loadbalance import WorkerLoad
from common.metrics import set_queue_depth, set_worker_loads
from common.slots import (
    HORIZON_MS,
    ResultsLag,
    SlowRuns,
    TurnoverMeter,
    handler_paces,
    peer_pace_ms,
    run_cost,
)
from common.topology import RESULTS_QUEUE, worker_queue

log = logging.getLogger(__name__)


class WorkerDirectory:
    """Live workers: fresh heartbeat, ACTIVE, and a consumer on their queue; the
    heartbeats and what is QUEUED on each worker are read through ``WorkerStore``.

    The view is cached for ``ttl`` seconds: the chooser counts each pick as one more
    active task and one slot less of the worker's room, so within that time the view
    stays right enough to spread a batch and to keep each queue within its bound
    (``common.slots``).
    """

    def __init__(
        self,
        workers: WorkerTransactions,
        connection: BlockingConnection,
        clock: ClusterClock,
        stale_ms: int,
        horizon_ms: int = HORIZON_MS,
        ttl: float = 0.5,
        scarce_ttl: float = 0.05,
        results_lag: ResultsLag | None = None,
    ) -> None:
        self._workers = workers
        self._connection = connection
        self._channel: BlockingChannel = connection.channel()
        self._clock = clock
        self._stale_ms = stale_ms
        self._ttl = ttl
        self._scarce_ttl = scarce_ttl
        self._cached: list[WorkerLoad] = []
        self._loaded_at = -1e18
        self.turnover = TurnoverMeter(horizon_ms, results_lag or ResultsLag())
        self.slow_runs = SlowRuns()
        self._horizon_ms = horizon_ms

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        """Live workers with their load, refreshed at most every ``ttl`` seconds.

        ``fresh_for`` refreshes a view that would go stale within that many seconds, so
        a caller can pay for the refresh before a moment that must not wait for it.
        """
        if time.monotonic() - self._loaded_at + fresh_for > self._view_ttl():
            self._cached = self._load()
            self._loaded_at = time.monotonic()
        return self._cached

    def _view_ttl(self) -> float:
        """How long the view is kept: briefly while a worker's queue is full, so that the
        room its runs free is seen (and measured) at once."""
        full = any(w.room <= 0 for w in self._cached)
        return self._scarce_ttl if full else self._ttl

    def handlers(self) -> set[str]:
        """Every handler some live worker runs."""
        return {name for worker in self.live() for name in worker.handlers}

    def consumer_count(self, worker_id: str) -> int:
        """Consumers on the worker's queue as the broker sees them; 0 if it has no queue."""
        counts = self.queue_counts(worker_id)
        return counts[1] if counts is not None else 0

    def queue_counts(self, worker_id: str) -> tuple[int, int] | None:
        """(messages ready, consumers) of the worker's queue; None if it has no queue."""
        counts = self._declare_passive(worker_queue(worker_id))
        set_queue_depth(worker_id, counts[0] if counts is not None else None)
        return counts

    def results_backlog(self) -> int:
        """Results messages waiting for a results consumer."""
        return self.queue_ready(RESULTS_QUEUE) or 0

    def queue_ready(self, queue: str) -> int | None:
        """Messages ready in ``queue``; None if it does not exist."""
        counts = self._declare_passive(queue)
        return counts[0] if counts is not None else None

    def _declare_passive(self, queue: str) -> tuple[int, int] | None:
        try:
            frame = self._channel.queue_declare(queue, passive=True)
        except ChannelClosedByBroker:
            # The broker closes the channel when the queue does not exist.
            self._channel = self._connection.channel()
            return None
        return int(frame.method.message_count), int(frame.method.consumer_count)

    def delete_queue(self, worker_id: str) -> bool:
        """Delete the worker's queue unless a consumer is on it; False if one is.

        The broker decides atomically (``if_unused``): a worker that came back and
        consumes keeps its queue; one that declared it but consumes only a moment later
        finds it gone, fails and declares it again on reconnecting.
        """
        try:
            self._channel.queue_delete(worker_queue(worker_id), if_unused=True)
        except ChannelClosedByBroker as e:
            self._channel = self._connection.channel()
            if e.reply_code != 404:  # no queue is as good as a deleted one
                return False
        set_queue_depth(worker_id, None)
        return True

    def sent(self, loads: list[WorkerLoad]) -> None:
        """Count what picks on ``loads`` (a view, or a copy of one) sent, for the turnover."""
        for load in loads:
            self.turnover.sent(load.worker_id, load.picked)
            self.slow_runs.sent(load.worker_id, load.picked, load.picked_extra * load.unit_ms)
            load.picked = load.picked_extra = 0

    def repriced(self, worker_id: str, queued: int, extra_ms: float, recalled: int) -> None:
        """Count the worker's queue as a recall found it: ``queued`` executions left on
        it, taking ``extra_ms`` beyond a place each at today's prices, after ``recalled``
        were taken back (which its in-flight count no longer holds, and did not finish)."""
        self.slow_runs.reprice(worker_id, queued, extra_ms)
        self.turnover.sent(worker_id, -recalled)
        # The view read before the count still shows the room the old prices left: the
        # firer would send the runs just recalled straight back into the same queue.
        self._loaded_at = -1e18

    def _load(self) -> list[WorkerLoad]:
        with self._workers.reading() as workers:
            fresh = workers.fresh_workers(self._clock.now_ms() - self._stale_ms)
            inflight = workers.queued_by_worker()
        self.sent(self._cached)
        at_s = time.monotonic()
        loads = []
        peers_ms = peer_pace_ms(worker.avg_ms for worker in fresh)
        paces = handler_paces(worker.handler_ms for worker in fresh)
        for worker in fresh:
            if self.consumer_count(worker.worker_id) <= 0:
                continue
            queued = inflight.get(worker.worker_id, 0)
            self.turnover.observe(worker.worker_id, queued, at_s)
            bound = self.turnover.bound(worker.worker_id, worker.capacity, worker.avg_ms, peers_ms)
            unit = self.turnover.unit_ms(worker.worker_id, worker.avg_ms, peers_ms)
            held = self.slow_runs.settle(worker.worker_id, queued)
            extra = math.ceil(held / unit) if unit >= 1 else 0
            loads.append(
                WorkerLoad(
                    worker_id=worker.worker_id,
                    active=worker.active + queued,
                    avg_ms=float(worker.avg_ms),
                    cpu_idle=float(worker.cpu_idle),
                    handlers=frozenset(worker.handlers),
                    room=max(0, bound - queued - extra),
                    costs=self._costs(worker, unit, paces),
                    unit_ms=unit,
                    bound=bound,
                    queued=queued,
                )
            )
        self.slow_runs.forget_except(load.worker_id for load in loads)
        set_worker_loads(loads)
        return loads

    def _costs(self, worker: WorkerRecord, unit_ms: float, paces: dict[str, int]) -> dict[str, int]:
        """The places a run of each of the worker's handlers takes in its queue: by the
        worker's own time for the handler, else the slowest peer's (``common.slots``).

        A worker that times runs but reports no time per handler (one older than the
        report) keeps one place per run, as it was bounded before.
        """
        if worker.avg_ms >= 1 and not worker.handler_ms:
            return {}
        costs = {}
        for handler in worker.handlers:
            pace = worker.handler_ms.get(handler, paces.get(handler))
            cost = run_cost(pace, unit_ms, self._horizon_ms)
            if cost > 1:
                costs[handler] = cost
        return costs
