"""Every RabbitMQ exchange and queue Kairos uses, and the code that declares them.

Declaration is idempotent: every service declares what it touches when it starts.
"""

from __future__ import annotations

from typing import Any

from pika.adapters.blocking_connection import BlockingChannel

DISPATCH_EXCHANGE = "kairos.dispatch"
RESULTS_EXCHANGE = "kairos.results"
RESULTS_QUEUE = "kairos.results"
# Results messages no dispatcher can read or record, set aside for an operator.
RESULTS_DEAD_QUEUE = "kairos.results.dead"
CALLBACKS_EXCHANGE = "kairos.callbacks"
CALLBACKS_QUEUE = "kairos.callbacks"
# Packs of callbacks (``CallbackPack``: one app's, to one URL), apart from the single
# ones: a notifier holds fewer messages of this queue, so that it never holds many
# more callbacks than its line is made for (``services/notifier/main.py``).
CALLBACK_PACKS_QUEUE = "kairos.callbacks.packs"
CALLBACKS_RETRY_EXCHANGE = "kairos.callbacks.retry"
CALLBACKS_DEAD_QUEUE = "kairos.callbacks.dead"


def worker_queue(worker_id: str) -> str:
    """The durable queue that one worker consumes."""
    return f"kairos.worker.{worker_id}"


def retry_queue(delay_ms: int) -> str:
    """The callback retry queue for one delay, named by it (``...retry.30s``, or
    ``...retry.4500ms`` for a delay that is not whole seconds)."""
    if delay_ms % 1000 == 0:
        return f"kairos.callbacks.retry.{delay_ms // 1000}s"
    return f"kairos.callbacks.retry.{delay_ms}ms"


def declare_core(channel: BlockingChannel) -> None:
    """Declare the exchanges and queues every service relies on."""
    channel.exchange_declare(DISPATCH_EXCHANGE, exchange_type="direct", durable=True)
    channel.exchange_declare(RESULTS_EXCHANGE, exchange_type="direct", durable=True)
    channel.queue_declare(RESULTS_QUEUE, durable=True)
    channel.queue_bind(RESULTS_QUEUE, RESULTS_EXCHANGE, routing_key=RESULTS_QUEUE)
    channel.queue_declare(RESULTS_DEAD_QUEUE, durable=True)
    channel.exchange_declare(CALLBACKS_EXCHANGE, exchange_type="direct", durable=True)
    channel.queue_declare(CALLBACKS_QUEUE, durable=True)
    channel.queue_bind(CALLBACKS_QUEUE, CALLBACKS_EXCHANGE, routing_key=CALLBACKS_QUEUE)
    channel.queue_declare(CALLBACK_PACKS_QUEUE, durable=True)
    channel.queue_bind(CALLBACK_PACKS_QUEUE, CALLBACKS_EXCHANGE, routing_key=CALLBACK_PACKS_QUEUE)
    channel.queue_declare(CALLBACKS_DEAD_QUEUE, durable=True)


def declare_worker_queue(channel: BlockingChannel, worker_id: str) -> str:
    """Declare and bind the queue of one worker; returns its name."""
    name = worker_queue(worker_id)
    channel.queue_declare(name, durable=True)
    channel.queue_bind(name, DISPATCH_EXCHANGE, routing_key=worker_id)
    return name


def declare_retry_tiers(channel: BlockingChannel, delays_ms: list[int]) -> None:
    """Declare one TTL queue per retry delay, each dead-lettering back to the callbacks queue.

    One queue per delay keeps a message with a short delay from waiting behind a long
    one (per-message TTL only expires at the head of a queue). A queue's arguments
    depend on its delay alone, and its name says the delay: a queue declared by an
    older notifier is declared again with the same arguments, never different ones.
    """
    channel.exchange_declare(CALLBACKS_RETRY_EXCHANGE, exchange_type="direct", durable=True)
    for delay in delays_ms:
        name = retry_queue(delay)
        arguments: dict[str, Any] = {
            "x-message-ttl": delay,
            "x-dead-letter-exchange": CALLBACKS_EXCHANGE,
            "x-dead-letter-routing-key": CALLBACKS_QUEUE,
        }
        channel.queue_declare(name, durable=True, arguments=arguments)
        channel.queue_bind(name, CALLBACKS_RETRY_EXCHANGE, routing_key=name)
