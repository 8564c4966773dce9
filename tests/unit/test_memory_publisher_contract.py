"""``MemoryPublisher`` keeps the publish contract (its real twin: tests/integration)."""

from __future__ import annotations

from common.broker import Publisher
from common.memory.broker import MemoryBroker, MemoryPublisher
from common.topology import declare_core, declare_worker_queue
from tests.contracts.publisher import Landed, PublisherContract


class TestMemoryPublisher(PublisherContract):
    """The contract on a fresh ``MemoryBroker``."""

    def setup_method(self) -> None:
        self.broker = MemoryBroker()
        declare_core(self.broker)
        self._publisher = MemoryPublisher(self.broker)

    @property
    def publisher(self) -> Publisher:
        return self._publisher

    def declare_worker(self, worker_id: str) -> None:
        declare_worker_queue(self.broker, worker_id)

    def landed(self, queue: str) -> list[Landed]:
        return [Landed(m.message_id, m.body, m.headers) for m in self.broker.take(queue)]

    def fail_next_commit(self) -> None:
        self._publisher.fail_next_commit()
