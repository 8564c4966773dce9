"""Workers in memory: the worker directory's twin for unit tests of routing and rescue.

``MemoryWorkers`` keeps the contracts of ``common.loadbalance.LiveWorkers`` and
``WorkerQueues`` as the dispatcher's ``WorkerDirectory`` does on MySQL and RabbitMQ: a
worker is live when its last heartbeat (a row of the store's workers table, read through
``WorkerStore`` as the real directory reads it) is fresh on
the given clock, it said ACTIVE, and a consumer is on its queue (in the memory broker);
its load is what its heartbeat reported plus what the store has QUEUED on it.
``tests/contracts/live_workers.py`` runs one test class against both. Its heartbeats
report no run time and an idle CPU, so the load score is the active count alone.

What it leaves out: the real directory's cache (it answers afresh on every call, so
picks of an earlier call are counted only through the store's QUEUED rows), queue
depths and the gauges.
"""

from __future__ import annotations

from pika.exceptions import ChannelClosedByBroker

from common.clock import Clock
from common.db.workers import Heartbeat
from common.loadbalance import UNBOUNDED, WorkerLoad
from common.memory.broker import NOT_FOUND, MemoryBroker
from common.memory.store import MemoryStore
from common.states import WorkerState
from common.topology import declare_worker_queue, worker_queue

CAPACITY = 8


class MemoryWorkers:
    """``LiveWorkers`` and ``WorkerQueues`` over the heartbeats and consumers a test sets,
    on its clock."""

    def __init__(
        self,
        clock: Clock,
        stale_ms: int,
        store: MemoryStore,
        broker: MemoryBroker,
        queue_bound: int | None = None,
    ) -> None:
        # The most executions each worker's queue may hold (None: no bound), fixed where
        # the real directory measures it (``common.slots``).
        self._queue_bound = queue_bound
        self._clock = clock
        self._stale_ms = stale_ms
        self._store = store
        self._broker = broker

    def heartbeat(
        self,
        worker_id: str,
        handlers: frozenset[str] | set[str],
        *,
        active: int = 0,
        state: WorkerState = WorkerState.ACTIVE,
        at_ms: int | None = None,
    ) -> None:
        """Record a heartbeat (now, unless ``at_ms``) in the store, as the worker's own
        would; whether its queue is consumed stays as it was."""
        at = self._clock.now_ms() if at_ms is None else at_ms
        names = tuple(sorted(handlers))
        beat = Heartbeat(worker_id, "memory", 1, CAPACITY, active, 100, 0, names, state, at, at)
        self._store.upsert_heartbeat(beat)

    def set_consuming(self, worker_id: str, consuming: bool = True) -> None:
        """A consumer comes onto the worker's queue, declaring it as the worker does (or,
        with False, every consumer goes off it)."""
        queue = worker_queue(worker_id)
        if consuming:
            declare_worker_queue(self._broker, worker_id)
            self._broker.consume(queue)
            return
        while self._broker.consumer_count(queue):
            self._broker.cancel(queue)

    def start(self, worker_id: str, handlers: frozenset[str] | set[str], active: int = 0) -> None:
        """A worker comes up: an ACTIVE heartbeat now, and a consumer on its queue."""
        self.heartbeat(worker_id, handlers, active=active)
        self.set_consuming(worker_id)

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        """Live workers by id, with their load: reported plus QUEUED on them in the store
        (read through ``WorkerStore``, as the real directory reads it)."""
        with self._store.reading() as store:
            fresh = store.fresh_workers(self._clock.now_ms() - self._stale_ms)
            queued = store.queued_by_worker()
        return [
            WorkerLoad(
                w.worker_id,
                w.active + queued.get(w.worker_id, 0),
                float(w.avg_ms),
                float(w.cpu_idle),
                frozenset(w.handlers),
                self._room(queued.get(w.worker_id, 0)),
            )
            for w in fresh
            if self.consumer_count(w.worker_id) > 0
        ]

    def _room(self, queued: int) -> int:
        return UNBOUNDED if self._queue_bound is None else max(0, self._queue_bound - queued)

    def consumer_count(self, worker_id: str) -> int:
        """Consumers on the worker's queue; 0 if it has no queue."""
        return self._broker.consumer_count(worker_queue(worker_id)) or 0

    def delete_queue(self, worker_id: str) -> bool:
        """Delete the worker's queue unless a consumer is on it (as ``WorkerDirectory``
        does, with ``if_unused``); no queue is as good as a deleted one."""
        try:
            self._broker.queue_delete(worker_queue(worker_id), if_unused=True)
        except ChannelClosedByBroker as e:
            return bool(e.reply_code == NOT_FOUND)
        return True
