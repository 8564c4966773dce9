"""Dramatiq side of ``bench/vs_peers.py``: a RabbitMQ broker and the no-op actor.

The benchmark starts the workers as (the broker URL names the round's own vhost):

    BENCH_PEERS_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/<vhost> \\
        .venv/bin/dramatiq bench.peers.dramatiq_tasks --processes 2 --threads 8

The module-level ``broker`` exists for that command, which imports this module by name
and uses the global broker; the submitting side builds its own with ``make_broker``.
Dramatiq's default middleware is kept (retries, age and time limits, ...), and so is
its default of publishing without confirms.
"""

# mypy: disable-error-code="import-untyped,import-not-found"

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from . import (
    AMQP_URL_ENV,
    DEFAULT_AMQP_URL,
    DRAMATIQ_ACTOR_NAME,
    DRAMATIQ_QUEUE,
    count_completion,
)


def make_broker(amqp_url: str) -> tuple[Any, Any]:
    """A RabbitMQ broker on ``amqp_url`` and the no-op actor registered on it."""
    rabbit = RabbitmqBroker(url=amqp_url)
    register = dramatiq.actor(
        broker=rabbit, actor_name=DRAMATIQ_ACTOR_NAME, queue_name=DRAMATIQ_QUEUE
    )
    actor = register(count_completion)
    return rabbit, actor


broker, noop = make_broker(os.environ.get(AMQP_URL_ENV, DEFAULT_AMQP_URL))
dramatiq.set_broker(broker)
