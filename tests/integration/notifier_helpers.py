"""A notifier in a thread on the test's vhost, and what notifier tests read back."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine
from standardwebhooks import Webhook

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import NotifierSettings, StoreSettings
from common.db.apps import AppCredentials
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.jobs import NewJob, insert_jobs
from common.topology import declare_core
from services.dispatcher.outcomes.callbacks import callback_message
from services.notifier.delivery import CallbackDeliverer
from services.notifier.main import _serve, notifier_parts
from services.notifier.posting import CallbackPoster
from services.notifier.schedule import RetrySchedule
from tests.integration.helpers import make_app
from tests.integration.receivers import LOCAL_RECEIVERS, ScriptedReceiver

TIERS = "1,2"  # attempts at 0, ~1 s, ~2 s later; DEAD after the third


@pytest.fixture
def app(engine: Engine) -> AppCredentials:
    return make_app(engine)


@pytest.fixture
def receiver() -> Iterator[ScriptedReceiver]:
    """A local receiver that answers 204 to every POST (unless scripted otherwise)."""
    server = ScriptedReceiver()
    yield server
    server.close()


@pytest.fixture
def deliverer(engine: Engine, redis_client: redis.Redis) -> Iterator[CallbackDeliverer]:
    """A deliverer on a started poster that reaches local receivers, retrying at 1 and
    2 s; closed with its poster after the test."""
    poster = CallbackPoster(10.0, policy=LOCAL_RECEIVERS)
    poster.start()
    made = CallbackDeliverer(engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2]))
    yield made
    made.close()
    poster.close()


@pytest.fixture
def notifier(namespace: StoreSettings, engine: Engine, redis_client: redis.Redis) -> Iterator[None]:
    """A notifier consuming the test's vhost in a thread, stopped after the test."""
    settings = NotifierSettings(
        namespace=namespace.namespace,
        retry_tiers_seconds=TIERS,
        request_timeout_seconds=3,
        secret_cache_seconds=0,
    )
    yield from serving(settings, engine, redis_client)


def serving(
    settings: NotifierSettings, engine: Engine, redis_client: redis.Redis, join_s: float = 30
) -> Iterator[None]:
    """Serve a notifier with ``settings`` in a thread until the generator is resumed, then
    stop it (waiting ``join_s`` at most) and close its poster."""
    poster = CallbackPoster(settings.request_timeout_seconds, policy=LOCAL_RECEIVERS)
    poster.start()
    parts = notifier_parts(settings, engine, poster, ClusterClock(redis_client))
    stop = threading.Event()
    thread = threading.Thread(target=_serve, args=(settings, parts, stop), daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=join_s)
    poster.close()


def record(engine: Engine, url: str) -> NewDelivery:
    """A job of app 1 with a PENDING delivery to ``url``, as the results consumer
    commits it before its publish."""
    with engine.begin() as conn:
        (job_id,) = insert_jobs(
            conn, [NewJob(1, "cb", "demo.noop", {}, None, 1_000, url, None, None)], 0
        )
        delivery = NewDelivery(
            "msg_" + uuid.uuid4().hex,
            str(uuid.uuid4()),
            job_id,
            1,
            url,
            json.dumps({"type": "execution.finished", "data": {"jobId": job_id}}),
        )
        MySqlDeliveryStore(conn).insert_deliveries([delivery], 0)
    return delivery


def send(engine: Engine, connection: BlockingConnection, url: str) -> str:
    """A job of app 1 with a recorded delivery to ``url``, handed to the notifier."""
    delivery = record(engine, url)
    declare_core(connection.channel())
    assert not BatchPublisher(connection.channel()).publish([callback_message(delivery)])
    return delivery.delivery_id


def row(engine: Engine, delivery_id: str) -> sa.Row[tuple[object, ...]]:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT * FROM callback_deliveries WHERE delivery_id = :d"), {"d": delivery_id}
        ).one()


def wait_for_status(engine: Engine, delivery_id: str, status: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if row(engine, delivery_id).status == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"{delivery_id} is {row(engine, delivery_id).status}, not {status}")


def attempts(engine: Engine, delivery_id: str) -> list[sa.Row[tuple[object, ...]]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT a.* FROM callback_attempts a JOIN callback_deliveries d "
                    "ON a.delivery_pk = d.id WHERE d.delivery_id = :d ORDER BY a.id"
                ),
                {"d": delivery_id},
            ).all()
        )


def verify_all(receiver: ScriptedReceiver, secret: str) -> set[str]:
    """Every arrival verified with the standardwebhooks package; their webhook-ids."""
    hook = Webhook(secret)
    for arrival in receiver.arrivals:
        hook.verify(arrival.body, arrival.headers)
        assert arrival.headers["user-agent"].startswith("Kairos-Webhooks/")
    return {a.headers["webhook-id"] for a in receiver.arrivals}
