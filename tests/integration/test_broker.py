"""The batch publisher on real RabbitMQ."""

from __future__ import annotations

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.config import StoreSettings
from common.topology import DISPATCH_EXCHANGE, declare_core, declare_worker_queue


def test_batch_lands_and_unroutable_messages_are_reported(namespace: StoreSettings) -> None:
    connection = connect(namespace, "test")
    try:
        channel = connection.channel()
        declare_core(channel)
        queue = declare_worker_queue(channel, "w1")
        publisher = BatchPublisher(connection.channel())
        messages = [
            OutgoingMessage(DISPATCH_EXCHANGE, "w1" if i % 2 else "nobody", b"{}", f"m{i}")
            for i in range(10)
        ]
        returned = publisher.publish(messages)
        assert returned == {f"m{i}" for i in range(0, 10, 2)}
        frame = channel.queue_declare(queue, passive=True)
        assert frame.method.message_count == 5
    finally:
        connection.close()


def test_messages_are_persistent(namespace: StoreSettings) -> None:
    connection = connect(namespace, "test")
    try:
        channel = connection.channel()
        declare_core(channel)
        queue = declare_worker_queue(channel, "w1")
        BatchPublisher(connection.channel()).publish(
            [OutgoingMessage(DISPATCH_EXCHANGE, "w1", b"{}", "m")]
        )
        method, properties, _body = channel.basic_get(queue, auto_ack=True)
        assert method is not None
        assert properties.delivery_mode == 2
        assert properties.message_id == "m"
    finally:
        connection.close()


def test_unroutable_messages_are_reported_from_inside_a_connection_callback(
    namespace: StoreSettings,
) -> None:
    """A consumer's flush publishes from a connection callback, where the blocking
    channel would queue the broker's returns unseen."""
    connection = connect(namespace, "test")
    try:
        declare_core(connection.channel())
        publisher = BatchPublisher(connection.channel())
        seen: list[set[str]] = []
        lost = OutgoingMessage(DISPATCH_EXCHANGE, "no-such-worker", b"{}", "lost")
        connection.add_callback_threadsafe(lambda: seen.append(publisher.publish([lost])))
        while not seen:
            connection.process_data_events(time_limit=0.2)
        assert seen == [{"lost"}]
    finally:
        connection.close()
