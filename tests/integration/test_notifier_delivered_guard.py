"""A copy of a callback message whose delivery is already DELIVERED (redelivered after a
lost connection) is not posted again: the receiver sees nothing, the row is unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.callback_urls import CallbackUrlPolicy
from common.clock import ClusterClock
from services.notifier.delivery import CallbackDeliverer
from services.notifier.posting import CallbackPoster
from services.notifier.schedule import RetrySchedule
from tests.e2e.harness import CallbackReceiver
from tests.integration.test_notifier_attempts import delivery_to


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    server = CallbackReceiver()
    yield server
    server.close()


@pytest.fixture
def deliverer(engine: Engine, redis_client: redis.Redis) -> Iterator[CallbackDeliverer]:
    poster = CallbackPoster(10.0, policy=CallbackUrlPolicy.from_settings("127.0.0.0/8", False))
    poster.start()
    yield CallbackDeliverer(engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2]))
    poster.close()


def row(engine: Engine) -> tuple[str, int]:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT status, attempts FROM callback_deliveries")).one()
    return str(found[0]), int(found[1])


def test_a_copy_of_a_delivered_callback_is_not_posted_again(
    engine: Engine, deliverer: CallbackDeliverer, receiver: CallbackReceiver
) -> None:
    message = delivery_to(engine, receiver.url)
    deliverer.deliver(message)
    assert (len(receiver.received), row(engine)) == (1, ("DELIVERED", 1))
    assert deliverer.deliver(message) is None
    assert (len(receiver.received), row(engine)) == (1, ("DELIVERED", 1))
