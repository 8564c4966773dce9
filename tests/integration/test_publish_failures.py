"""A publish that raises inside a claim or a fire: the transaction goes back whole, and
the next pass sends the same executions, once."""

from __future__ import annotations

import queue
from collections.abc import Iterator, Sequence
from typing import cast

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.jobs import NewJob, insert_job
from common.errors import PublishFailedError
from common.loadbalance import WorkerChooser, WorkerLoad
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender, OpenClaim
from tests.integration.helpers import make_app
from tests.integration.test_firing import firer, scheduled, statuses

W1 = WorkerLoad("w1", 0, 0.0, 100.0, frozenset({"demo.noop"}))


class RaisingPublisher:
    """The broker refusing the batch (a nack, a channel closed under the publish)."""

    def __init__(self) -> None:
        self.tries = 0

    def publish(self, messages: Sequence[OutgoingMessage]) -> set[str]:
        self.tries += 1
        raise PublishFailedError("the broker refused the batch")


@pytest.fixture
def channel(namespace: StoreSettings) -> Iterator[BlockingChannel]:
    connection: BlockingConnection = connect(namespace, "test")
    opened = connection.channel()
    declare_core(opened)
    declare_worker_queue(opened, "w1")
    yield opened
    connection.close()


def executions(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT execution_id, status FROM executions")).all()
    return [(str(r[0]), str(r[1])) for r in found]


def open_claim(engine: Engine, client: redis.Redis) -> OpenClaim:
    sender = ClaimSender(WorkerChooser())
    sender.workers = (W1,)
    TriggerClaimer(engine, ClusterClock(client), 500, 60_000, sender).claim({"demo.noop"})
    try:
        return sender._ready.get_nowait()
    except queue.Empty:
        raise AssertionError("the claim sent nothing") from None


def test_a_publish_raising_inside_a_claim_rolls_it_back_and_the_next_claim_sends_it(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    with engine.begin() as conn:
        job_ids = [
            insert_job(
                conn, NewJob(1, f"j{n}", "demo.noop", {}, None, now - 10, None, None, None), 0
            )
            for n in range(5)
        ]
    raising = RaisingPublisher()
    with pytest.raises(PublishFailedError):
        open_claim(engine, redis_client).send(cast(BatchPublisher, raising))
    assert raising.tries == 1
    assert executions(engine) == []  # the claim went back whole: the jobs are due again
    landed = open_claim(engine, redis_client).send(BatchPublisher(channel))
    assert landed == len(job_ids)
    assert sorted(status for _, status in executions(engine)) == ["QUEUED"] * len(job_ids)


def test_a_publish_raising_inside_a_fire_leaves_every_execution_scheduled(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    with engine.begin() as conn:
        job_ids = [
            insert_job(conn, NewJob(1, f"j{n}", "demo.noop", {}, None, 0, None, None, None), 0)
            for n in range(5)
        ]
    for n, job_id in enumerate(job_ids):
        scheduled(engine, job_id, f"e{n}", now - 10)
    fire = firer(engine, redis_client, connection)
    fire._publisher = cast(BatchPublisher, RaisingPublisher())
    fire.load()
    with pytest.raises(PublishFailedError):
        fire.fire_due()
    assert set(statuses(engine).values()) == {"SCHEDULED"}
    again = firer(engine, redis_client, connection)
    again.load()
    assert again.fire_due() == 5
    assert set(statuses(engine).values()) == {"QUEUED"}
