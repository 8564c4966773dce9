"""A broker in memory and a publisher on it that keeps ``BatchPublisher``'s contract.

For unit tests of the paths that publish (as dramatiq's StubBroker serves its users): a
message sent to an exchange and routing key that a queue is bound to lands in that
queue, where the test reads it; one that no queue takes comes back as an unroutable id;
a commit told to fail raises ``PublishFailedError`` and keeps nothing of its batch. The
topology is declared with the same functions as on RabbitMQ (``common.topology``): the
broker answers the channel calls they make.

Consumers are counted, not served: a queue says how many it has, and deleting it
``if_unused`` fails while it has one, as on RabbitMQ. What it leaves out: exchanges other
than direct ones (Kairos declares no other), queue arguments (TTLs, dead-lettering: a
retry tier never sends its messages on), delivery to consumers, acknowledgements and
redelivery. ``tests/contracts/publisher.py`` holds it
to what the real publisher does, on both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pika.exceptions import ChannelClosedByBroker

from common.broker import OutgoingMessage
from common.errors import PublishFailedError

DEFAULT_EXCHANGE = ""
DIRECT = "direct"
NOT_FOUND = 404
PRECONDITION_FAILED = 406


class MemoryBroker:
    """Exchanges, queues and bindings in memory; declared as on a pika channel."""

    def __init__(self) -> None:
        self._exchanges: set[str] = {DEFAULT_EXCHANGE}
        self._queues: dict[str, list[OutgoingMessage]] = {}
        self._bindings: dict[tuple[str, str], list[str]] = {}
        self._consumers: Counter[str] = Counter()
        self._refused_deletes: list[str] = []

    def exchange_declare(
        self, exchange: str, exchange_type: str = DIRECT, durable: bool = False
    ) -> None:
        """Declare a direct exchange (the only kind Kairos uses)."""
        if exchange_type != DIRECT:
            raise NotImplementedError(
                f"the memory broker has direct exchanges only, not {exchange_type}"
            )
        self._exchanges.add(exchange)

    def queue_declare(
        self, queue: str, durable: bool = False, arguments: dict[str, Any] | None = None
    ) -> None:
        """Declare a queue; the default exchange routes its name to it, as RabbitMQ's does.
        Its arguments are not kept."""
        self._queues.setdefault(queue, [])

    def queue_bind(self, queue: str, exchange: str, routing_key: str) -> None:
        """Bind a declared queue to a declared exchange under ``routing_key``."""
        if queue not in self._queues or exchange not in self._exchanges:
            raise KeyError(f"bind {queue!r} to {exchange!r}: declare both first")
        bound = self._bindings.setdefault((exchange, routing_key), [])
        if queue not in bound:
            bound.append(queue)

    def consume(self, queue: str) -> None:
        """Put a consumer on a declared queue."""
        if queue not in self._queues:
            raise KeyError(f"consume from {queue!r}: declare it first")
        self._consumers[queue] += 1

    def cancel(self, queue: str) -> None:
        """Take one consumer off the queue (none left: nothing happens)."""
        if self._consumers[queue] > 0:
            self._consumers[queue] -= 1

    def consumer_count(self, queue: str) -> int | None:
        """How many consumers the queue has; None if it does not exist."""
        return self._consumers[queue] if queue in self._queues else None

    def refuse_next_delete(self, reason: str = "the broker refused") -> None:
        """Make the next ``queue_delete`` fail as RabbitMQ's does when it refuses one."""
        self._refused_deletes.append(reason)

    def queue_delete(self, queue: str, if_unused: bool = False) -> None:
        """Delete the queue, its messages and its bindings; raise as pika does when the
        broker closes the channel: 404 for no such queue, 406 for one in use
        (``if_unused``) or a refusal the test asked for."""
        if self._refused_deletes:
            raise ChannelClosedByBroker(PRECONDITION_FAILED, self._refused_deletes.pop(0))
        if queue not in self._queues:
            raise ChannelClosedByBroker(NOT_FOUND, f"NOT_FOUND - no queue '{queue}'")
        if if_unused and self._consumers[queue] > 0:
            raise ChannelClosedByBroker(
                PRECONDITION_FAILED, f"PRECONDITION_FAILED - {queue} in use"
            )
        del self._queues[queue]
        del self._consumers[queue]
        for bound in self._bindings.values():
            if queue in bound:
                bound.remove(queue)

    def queues(self) -> set[str]:
        """The names of the queues declared and not deleted."""
        return set(self._queues)

    def messages(self, queue: str) -> list[OutgoingMessage]:
        """What the queue holds now, oldest first."""
        return list(self._queues[queue])

    def take(self, queue: str) -> list[OutgoingMessage]:
        """Empty the queue; what it held, oldest first."""
        taken = self._queues[queue]
        self._queues[queue] = []
        return taken

    def knows_exchange(self, exchange: str) -> bool:
        """Whether ``exchange`` was declared (the default exchange always is)."""
        return exchange in self._exchanges

    def route(self, message: OutgoingMessage) -> list[str]:
        """The queues ``message`` lands in (none: the broker returns it)."""
        if message.exchange == DEFAULT_EXCHANGE:
            return [message.routing_key] if message.routing_key in self._queues else []
        return list(self._bindings.get((message.exchange, message.routing_key), ()))

    def deliver(self, message: OutgoingMessage, queues: Sequence[str]) -> None:
        """Put ``message`` in each of ``queues``."""
        for queue in queues:
            self._queues[queue].append(message)


class MemoryPublisher:
    """``BatchPublisher`` on a ``MemoryBroker``: a batch lands whole at its commit or not
    at all; the ids of the messages no queue took are returned."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self._failures: list[str] = []
        self.commits = 0

    def fail_next_commit(self, reason: str = "connection lost") -> None:
        """Make the next ``publish`` fail as a lost connection would: nothing lands."""
        self._failures.append(reason)

    def publish(self, messages: Sequence[OutgoingMessage]) -> set[str]:
        """Publish and commit ``messages``; return the ids the broker could not route.

        Raises ``PublishFailedError`` when the commit fails (told to, or a message names
        an exchange nobody declared, which makes RabbitMQ close the channel): then
        nothing of the batch lands.
        """
        if self._failures:
            reason = self._failures.pop(0)
            raise PublishFailedError(f"publishing {len(messages)} messages failed: {reason}")
        unknown = sorted(
            {m.exchange for m in messages if not self.broker.knows_exchange(m.exchange)}
        )
        if unknown:
            raise PublishFailedError(
                f"publishing {len(messages)} messages failed: no exchange {unknown[0]!r}"
            )
        returned: set[str] = set()
        routes = [(m, self.broker.route(m)) for m in messages]
        for message, queues in routes:
            if queues:
                self.broker.deliver(message, queues)
            else:
                returned.add(message.message_id)
        self.commits += 1
        return returned
