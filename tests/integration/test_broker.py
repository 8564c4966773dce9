"""The batch publisher on real RabbitMQ."""

from __future__ import annotations

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.config import NotifierSettings, StoreSettings
from common.topology import (
    CALLBACKS_EXCHANGE,
    CALLBACKS_QUEUE,
    CALLBACKS_RETRY_EXCHANGE,
    DISPATCH_EXCHANGE,
    declare_core,
    declare_retry_tiers,
    declare_worker_queue,
)
from services.notifier.schedule import RetrySchedule


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


def test_retry_queues_of_the_earlier_schedule_are_declared_again_unchanged(
    namespace: StoreSettings,
) -> None:
    """A vhost where notifiers of the 5,30,300 schedule ran keeps working: the new
    schedule declares those names with the same arguments (RabbitMQ refuses changed
    ones), and its own buckets beside them."""
    connection = connect(namespace, "test")
    try:
        channel = connection.channel()
        declare_core(channel)
        channel.exchange_declare(CALLBACKS_RETRY_EXCHANGE, exchange_type="direct", durable=True)
        for seconds in (5, 30, 300):
            old_arguments = {
                "x-message-ttl": seconds * 1000,
                "x-dead-letter-exchange": CALLBACKS_EXCHANGE,
                "x-dead-letter-routing-key": CALLBACKS_QUEUE,
            }
            channel.queue_declare(
                f"kairos.callbacks.retry.{seconds}s", durable=True, arguments=old_arguments
            )
        delays = RetrySchedule(NotifierSettings().retry_tiers()).all_delays()
        declare_retry_tiers(channel, delays)
        assert {5_000, 30_000, 300_000} <= set(delays)
        channel.queue_declare("kairos.callbacks.retry.4500ms", passive=True)
    finally:
        connection.close()
