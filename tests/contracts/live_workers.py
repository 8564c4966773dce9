"""The live workers contract, which ``WorkerDirectory`` (MySQL and RabbitMQ) and
``MemoryWorkers`` keep: who is live, and with what load; and the worker queues
contract: the consumers on a worker's queue, and deleting it unless one is on it."""

from __future__ import annotations

from abc import ABC, abstractmethod

from common.loadbalance import WorkerLoad, WorkerQueues
from common.states import WorkerState

STALE_MS = 60_000
NOOP = frozenset({"demo.noop"})


class LiveWorkersContract(ABC):
    """What every worker view answers, as heartbeats, consumers and queued runs change."""

    @property
    @abstractmethod
    def directory(self) -> WorkerQueues:
        """The view under test: stale after ``STALE_MS``, read afresh on every call."""

    @abstractmethod
    def now_ms(self) -> int:
        """The clock the view judges heartbeats by."""

    @abstractmethod
    def heartbeat(
        self,
        worker_id: str,
        handlers: frozenset[str],
        at_ms: int,
        active: int = 0,
        state: WorkerState = WorkerState.ACTIVE,
    ) -> None:
        """Record a heartbeat of ``worker_id`` sent at ``at_ms``."""

    @abstractmethod
    def consume(self, worker_id: str) -> None:
        """Put a consumer on the worker's queue."""

    @abstractmethod
    def declare_queue(self, worker_id: str) -> None:
        """Declare the worker's queue, with no consumer on it."""

    @abstractmethod
    def queue_exists(self, worker_id: str) -> bool:
        """Whether the worker's queue exists."""

    @abstractmethod
    def queue_runs(self, worker_id: str, count: int) -> None:
        """Store ``count`` executions QUEUED on the worker."""

    def live(self) -> dict[str, WorkerLoad]:
        return {w.worker_id: w for w in self.directory.live()}

    def test_a_fresh_active_worker_with_a_consumer_is_live_with_its_handlers(self) -> None:
        handlers = frozenset({"demo.noop", "report.build"})
        self.heartbeat("w1", handlers, self.now_ms(), active=2)
        self.consume("w1")
        [w1] = self.directory.live()
        assert (w1.worker_id, w1.handlers, w1.active) == ("w1", handlers, 2)

    def test_a_worker_without_a_consumer_is_not_live(self) -> None:
        self.heartbeat("w1", NOOP, self.now_ms())
        assert self.live() == {}
        self.consume("w1")
        assert set(self.live()) == {"w1"}

    def test_a_stale_heartbeat_is_not_live(self) -> None:
        now = self.now_ms()
        self.heartbeat("old", NOOP, now - STALE_MS - 5_000)
        self.heartbeat("new", NOOP, now - STALE_MS + 5_000)
        self.consume("old")
        self.consume("new")
        assert set(self.live()) == {"new"}

    def test_a_draining_or_stopped_worker_is_not_live(self) -> None:
        now = self.now_ms()
        for worker_id, state in (("d", WorkerState.DRAINING), ("s", WorkerState.STOPPED)):
            self.heartbeat(worker_id, NOOP, now, state=state)
            self.consume(worker_id)
        self.heartbeat("a", NOOP, now)
        self.consume("a")
        assert set(self.live()) == {"a"}

    def test_the_load_counts_what_is_queued_on_the_worker_besides_what_it_reports(self) -> None:
        now = self.now_ms()
        self.heartbeat("w1", NOOP, now, active=1)
        self.heartbeat("w2", NOOP, now)
        self.consume("w1")
        self.consume("w2")
        self.queue_runs("w1", 3)
        self.queue_runs("w2", 2)
        assert {w.worker_id: w.active for w in self.live().values()} == {"w1": 4, "w2": 2}

    def test_consumer_count_counts_the_consumers_on_the_workers_queue(self) -> None:
        assert self.directory.consumer_count("none") == 0, "no queue"
        self.declare_queue("idle")
        assert self.directory.consumer_count("idle") == 0
        self.consume("busy")
        assert self.directory.consumer_count("busy") == 1

    def test_delete_queue_deletes_a_queue_with_no_consumer_or_none_at_all(self) -> None:
        self.declare_queue("gone")
        assert self.directory.delete_queue("gone")
        assert not self.queue_exists("gone")
        assert self.directory.delete_queue("gone"), "no queue is as good as a deleted one"
        assert self.directory.delete_queue("never")

    def test_delete_queue_keeps_a_queue_a_consumer_is_on(self) -> None:
        self.consume("back")
        assert not self.directory.delete_queue("back")
        assert self.queue_exists("back")
        assert self.directory.consumer_count("back") == 1
