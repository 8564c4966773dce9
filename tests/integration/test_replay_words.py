"""A replayed callback is sent as asked, logged as a replay (INFO), not as a callback
lost between its record and its publish (WARNING)."""

from __future__ import annotations

import logging

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.db.apps import AppCredentials
from common.topology import declare_core
from services.dispatcher.outcomes.callbacks import republish_stale_deliveries
from tests.integration.notifier_helpers import app, record

__all__ = ["app"]  # fixture

LOGGER = "services.dispatcher.outcomes.callbacks"


def test_a_replayed_delivery_is_sent_with_an_info_line_and_a_lost_one_with_a_warning(
    engine: Engine,
    connection: BlockingConnection,
    redis_client: redis.Redis,
    app: AppCredentials,
    caplog: pytest.LogCaptureFixture,
) -> None:
    replayed = record(engine, "https://hooks.example/a")
    lost = record(engine, "https://hooks.example/b")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE callback_deliveries SET updated_at = 0, attempts = 2 WHERE delivery_id = %s",
            (replayed.delivery_id,),
        )
        conn.exec_driver_sql("UPDATE callback_deliveries SET updated_at = 0")
    declare_core(connection.channel())
    publisher = BatchPublisher(connection.channel())
    with caplog.at_level(logging.INFO, logger=LOGGER):
        republish_stale_deliveries(engine, publisher, ClusterClock(redis_client), 1_000)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]
    assert said == [
        (logging.INFO, "sending 1 replayed callback deliveries"),
        (
            logging.WARNING,
            "republishing 1 callback deliveries never confirmed in the notifier's queue",
        ),
    ]
    assert lost.delivery_id != replayed.delivery_id
