"""The publish contract, which ``BatchPublisher`` on RabbitMQ and ``MemoryPublisher`` keep.

A subclass provides the publisher on a fresh broker (its own vhost, or a new
``MemoryBroker``) with the core topology declared, and the few hooks below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pytest

from common.broker import OutgoingMessage, Publisher
from common.errors import PublishFailedError
from common.topology import (
    CALLBACKS_EXCHANGE,
    CALLBACKS_QUEUE,
    DISPATCH_EXCHANGE,
    RESULTS_DEAD_QUEUE,
    RESULTS_EXCHANGE,
    RESULTS_QUEUE,
    worker_queue,
)


@dataclass(frozen=True)
class Landed:
    """A message as a queue holds it."""

    message_id: str
    body: bytes
    headers: dict[str, Any] | None


def to_worker(worker_id: str, message_id: str, body: bytes = b"{}") -> OutgoingMessage:
    """A dispatch message for ``worker_id``."""
    return OutgoingMessage(DISPATCH_EXCHANGE, worker_id, body, message_id)


class PublisherContract(ABC):
    """What every publisher does with a batch."""

    @property
    @abstractmethod
    def publisher(self) -> Publisher:
        """The publisher under test, on a broker with the core topology declared."""

    @abstractmethod
    def declare_worker(self, worker_id: str) -> None:
        """Declare and bind the queue of ``worker_id``."""

    @abstractmethod
    def landed(self, queue: str) -> list[Landed]:
        """Take every message ``queue`` holds, oldest first."""

    @abstractmethod
    def fail_next_commit(self) -> None:
        """Make the next commit fail as a lost channel would."""

    def test_a_batch_lands_in_its_bound_queues_in_order(self) -> None:
        self.declare_worker("w1")
        self.declare_worker("w2")
        batch = [to_worker("w1", "a", b"1"), to_worker("w2", "b", b"2"), to_worker("w1", "c", b"3")]
        assert self.publisher.publish(batch) == set()
        assert self.landed(worker_queue("w1")) == [Landed("a", b"1", None), Landed("c", b"3", None)]
        assert self.landed(worker_queue("w2")) == [Landed("b", b"2", None)]

    def test_messages_no_queue_takes_come_back_by_id_and_the_rest_land(self) -> None:
        self.declare_worker("w1")
        batch = [to_worker("w1" if n % 2 else "nobody", f"m{n}") for n in range(6)]
        assert self.publisher.publish(batch) == {"m0", "m2", "m4"}
        assert [m.message_id for m in self.landed(worker_queue("w1"))] == ["m1", "m3", "m5"]

    def test_only_this_batch_unroutable_ids_are_returned(self) -> None:
        self.declare_worker("w1")
        assert self.publisher.publish([to_worker("nobody", "lost")]) == {"lost"}
        assert self.publisher.publish([to_worker("w1", "kept")]) == set()
        assert [m.message_id for m in self.landed(worker_queue("w1"))] == ["kept"]

    def test_an_empty_batch_returns_nothing(self) -> None:
        assert self.publisher.publish([]) == set()

    def test_headers_and_body_travel_unchanged(self) -> None:
        headers = {"x-reason": "refused", "x-attempt": 3}
        message = OutgoingMessage(CALLBACKS_EXCHANGE, CALLBACKS_QUEUE, b'{"v":1}', "d1", headers)
        assert self.publisher.publish([message]) == set()
        assert self.landed(CALLBACKS_QUEUE) == [Landed("d1", b'{"v":1}', headers)]

    def test_results_exchange_and_default_exchange_route_by_queue_name(self) -> None:
        batch = [
            OutgoingMessage(RESULTS_EXCHANGE, RESULTS_QUEUE, b"{}", "r1"),
            OutgoingMessage("", RESULTS_DEAD_QUEUE, b"{}", "aside"),
            OutgoingMessage("", "kairos.no-such-queue", b"{}", "nowhere"),
        ]
        assert self.publisher.publish(batch) == {"nowhere"}
        assert [m.message_id for m in self.landed(RESULTS_QUEUE)] == ["r1"]
        assert [m.message_id for m in self.landed(RESULTS_DEAD_QUEUE)] == ["aside"]

    def test_a_failed_commit_raises_and_keeps_nothing(self) -> None:
        self.declare_worker("w1")
        self.fail_next_commit()
        with pytest.raises(PublishFailedError):
            self.publisher.publish([to_worker("w1", "a"), to_worker("w1", "b")])
        assert self.landed(worker_queue("w1")) == []

    def test_a_message_to_an_undeclared_exchange_fails_the_whole_batch(self) -> None:
        self.declare_worker("w1")
        stray = OutgoingMessage("kairos.no-such-exchange", "w1", b"{}", "stray")
        with pytest.raises(PublishFailedError):
            self.publisher.publish([to_worker("w1", "a"), stray])
        assert self.landed(worker_queue("w1")) == []
