"""``BatchPublisher`` on RabbitMQ keeps the publish contract (its fake: tests/unit)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pika.adapters.blocking_connection import BlockingChannel

from common.broker import BatchPublisher, Publisher, connect
from common.config import StoreSettings
from common.topology import declare_core, declare_worker_queue
from tests.contracts.publisher import Landed, PublisherContract


class TestBatchPublisher(PublisherContract):
    """The contract on the test's own vhost."""

    @pytest.fixture(autouse=True)
    def _broker(self, namespace: StoreSettings) -> Iterator[None]:
        connection = connect(namespace, "publisher contract")
        self._channel: BlockingChannel = connection.channel()
        declare_core(self._channel)
        self._publish_channel = connection.channel()
        self._publisher = BatchPublisher(self._publish_channel)
        yield
        connection.close()

    @property
    def publisher(self) -> Publisher:
        return self._publisher

    def declare_worker(self, worker_id: str) -> None:
        declare_worker_queue(self._channel, worker_id)

    def landed(self, queue: str) -> list[Landed]:
        taken: list[Landed] = []
        while True:
            method, properties, body = self._channel.basic_get(queue, auto_ack=True)
            if method is None:
                return taken
            taken.append(Landed(properties.message_id, body, properties.headers))

    def fail_next_commit(self) -> None:
        # The publisher's channel goes as a lost connection would take it: nothing
        # framed on it can be committed.
        self._publish_channel.close()
