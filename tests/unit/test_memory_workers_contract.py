"""``MemoryWorkers`` keeps the live workers contract (its real twin: tests/integration)."""

from __future__ import annotations

from common.db.executions import NewExecution
from common.loadbalance import WorkerQueues
from common.memory.broker import MemoryBroker
from common.memory.live_workers import MemoryWorkers
from common.memory.rows import MemoryJob
from common.memory.store import MemoryStore
from common.states import WorkerState
from common.topology import declare_core, declare_worker_queue, worker_queue
from tests.contracts.live_workers import STALE_MS, LiveWorkersContract


class FixedClock:
    def now_ms(self) -> int:
        return 1_000_000


class TestMemoryWorkers(LiveWorkersContract):
    """The contract on new ``MemoryWorkers`` over a new ``MemoryStore`` and ``MemoryBroker``."""

    def setup_method(self) -> None:
        self.store = MemoryStore()
        self.broker = MemoryBroker()
        declare_core(self.broker)
        self.workers = MemoryWorkers(FixedClock(), STALE_MS, self.store, self.broker)

    @property
    def directory(self) -> WorkerQueues:
        return self.workers

    def now_ms(self) -> int:
        return FixedClock().now_ms()

    def heartbeat(
        self,
        worker_id: str,
        handlers: frozenset[str],
        at_ms: int,
        active: int = 0,
        state: WorkerState = WorkerState.ACTIVE,
    ) -> None:
        self.workers.heartbeat(worker_id, handlers, active=active, state=state, at_ms=at_ms)

    def consume(self, worker_id: str) -> None:
        self.workers.set_consuming(worker_id)

    def declare_queue(self, worker_id: str) -> None:
        declare_worker_queue(self.broker, worker_id)

    def queue_exists(self, worker_id: str) -> bool:
        return worker_queue(worker_id) in self.broker.queues()

    def queue_runs(self, worker_id: str, count: int) -> None:
        job = self.store.add_job(MemoryJob())
        rows = [NewExecution(f"{worker_id}-{n}", job, n, 1_000, 1_000) for n in range(1, count + 1)]
        self.store.insert_executions([r.queued_on(worker_id) for r in rows], 1_000)
