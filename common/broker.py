"""RabbitMQ connections and a publisher that confirms whole batches at once.

Confirming each message costs a round trip; a batch
published inside an AMQP transaction costs one round trip per batch and gives the same
guarantee: ``tx.commit-ok`` arrives only once the broker has taken every message (and
written the persistent ones to disk). Unroutable mandatory messages come back as
``basic.return`` before the commit answer, so the caller learns which ones did not land.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import pika
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.channel import Channel
from pika.exceptions import AMQPError
from pika.spec import Basic, BasicProperties

from common.config import StoreSettings
from common.errors import PublishFailedError, StoreUnavailableError
from common.metrics import PUBLISH_FAILURES, observe_publish

log = logging.getLogger(__name__)

PERSISTENT = 2


def connection_parameters(settings: StoreSettings, name: str) -> pika.URLParameters:
    """Parameters for the namespace's vhost, named so the management UI shows who is who."""
    url = settings.amqp_url.rstrip("/") + "/" + quote(settings.namespace, safe="")
    params = pika.URLParameters(url + "?heartbeat=30&blocked_connection_timeout=60")
    params.client_properties = {"connection_name": name}
    return params


def connect(settings: StoreSettings, name: str) -> BlockingConnection:
    """Open a blocking connection to the namespace's vhost."""
    try:
        return BlockingConnection(connection_parameters(settings, name))
    except AMQPError as e:
        raise StoreUnavailableError("RabbitMQ", settings.amqp_url, repr(e)) from e


@dataclass(frozen=True)
class OutgoingMessage:
    """One message to publish: where it goes and what it carries."""

    exchange: str
    routing_key: str
    body: bytes
    message_id: str
    headers: dict[str, Any] | None = None


class Publisher(Protocol):
    """What sending needs of a publisher: a batch published under one commit.

    ``BatchPublisher`` is the real one; ``common.memory.broker.MemoryPublisher`` keeps
    the same contract in memory for unit tests.
    """

    def publish(self, messages: Sequence[OutgoingMessage]) -> set[str]:
        """Publish and commit ``messages``; return the ids the broker could not route.

        Raises ``PublishFailedError`` when the commit fails: nothing of the batch is
        known to have landed.
        """
        ...


class BatchPublisher:
    """Publishes persistent, mandatory messages in transactions, one commit per batch."""

    def __init__(self, channel: BlockingChannel) -> None:
        self._channel = channel
        self._returned: set[str] = set()
        # On the underlying channel: BlockingChannel defers its return callbacks to the
        # next dispatch of events, which pika refuses while publish runs inside another
        # callback (a consumer's flush), so the returns came after publish had answered
        # and were lost. The underlying channel calls back as the frame arrives, which
        # is before the commit answer.
        channel._impl.add_on_return_callback(self._on_return)
        channel.tx_select()

    def _on_return(
        self, _channel: Channel, _method: Basic.Return, properties: BasicProperties, _body: bytes
    ) -> None:
        self._returned.add(properties.message_id)

    def publish(self, messages: Sequence[OutgoingMessage]) -> set[str]:
        """Publish and commit ``messages``; return the ids the broker could not route.

        Raises ``PublishFailedError`` when the commit fails: then nothing of the batch
        is known to have landed and the caller keeps it for another try.
        """
        self._returned.clear()
        began = time.perf_counter()
        # BlockingChannel.basic_publish runs the I/O loop after every message (a poll
        # and a send each); the underlying channel only frames the message into the
        # connection's output buffer, and the commit below sends the lot and waits for
        # the broker.
        frame_only = self._channel._impl
        try:
            for message in messages:
                frame_only.basic_publish(
                    message.exchange,
                    message.routing_key,
                    message.body,
                    pika.BasicProperties(
                        delivery_mode=PERSISTENT,
                        message_id=message.message_id,
                        content_type="application/json",
                        headers=message.headers,
                    ),
                    mandatory=True,
                )
            self._channel.tx_commit()
            self._channel.connection.process_data_events(0)
        except AMQPError as e:
            PUBLISH_FAILURES.inc()
            raise PublishFailedError(f"publishing {len(messages)} messages failed: {e!r}") from e
        returned = set(self._returned)
        observe_publish([m.exchange for m in messages], len(returned), time.perf_counter() - began)
        if returned:
            log.warning("broker returned %d unroutable messages", len(returned))
        return returned
