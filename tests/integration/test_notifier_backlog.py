"""Two apps share a notifier while one bursts to one host, far past the backlog bound and
past what the notifier holds.

A burst to a fast receiver waits in the line and the callbacks queue, not in a retry
tier: nothing is parked, and the other app's callbacks, queued behind the burst, are
delivered with it. A burst to a slow receiver is parked past its bound once the line
is full and stalls, so the other app's callbacks behind it reach the line and are
delivered within seconds. The books: every delivery DELIVERED once, one attempt row
each, each webhook-id posted once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.config import NotifierSettings, StoreSettings
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.jobs import NewJob, insert_jobs
from common.topology import declare_core
from services.dispatcher.outcomes.callbacks import callback_message
from tests.integration.helpers import make_app
from tests.integration.notifier_helpers import serving
from tests.integration.receivers import ScriptedReceiver

pytestmark = pytest.mark.timeout(180)

BURST = 2_000
OTHERS = 20
HELD = 300  # the notifier's prefetch: the burst is several times what it holds
BACKLOG = 50
# The other app's callbacks, queued behind the burst, reach the line once the burst's
# stalled backlog is parked: the stall (2 s), a sweep (1 s) and the posts, on a busy box.
OTHERS_WITHIN_SECONDS = 10.0


@pytest.fixture
def notifier(namespace: StoreSettings, engine: Engine, redis_client: redis.Redis) -> Iterator[None]:
    """A notifier holding ``HELD`` callbacks with backlog bounds of ``BACKLOG``."""
    settings = NotifierSettings(
        namespace=namespace.namespace,
        held_callbacks=HELD,
        app_backlog=BACKLOG,
        host_backlog=BACKLOG,
        retry_tiers_seconds="5,60",
        request_timeout_seconds=5,
    )
    yield from serving(settings, engine, redis_client, join_s=60)


def app_pk(engine: Engine, name: str) -> int:
    app_id = make_app(engine, name).app_id
    with engine.connect() as conn:
        query = sa.text("SELECT id FROM apps WHERE app_id = :a")
        return int(conn.execute(query, {"a": app_id}).scalar_one())


def send_many(
    engine: Engine, connection: BlockingConnection, app: int, url: str, count: int
) -> list[str]:
    """``count`` jobs of ``app`` with a recorded delivery each to ``url``, published to
    the callbacks queue in this order; their delivery ids."""
    jobs = [NewJob(app, "cb", "demo.noop", {}, None, 1_000, url, None, None)] * count
    with engine.begin() as conn:
        job_ids = insert_jobs(conn, jobs, 0)
        rows = [
            NewDelivery(
                "msg_" + uuid.uuid4().hex,
                str(uuid.uuid4()),
                job_id,
                app,
                url,
                json.dumps({"type": "execution.finished", "data": {"jobId": job_id}}),
            )
            for job_id in job_ids
        ]
        MySqlDeliveryStore(conn).insert_deliveries(rows, 0)
    declare_core(connection.channel())
    assert not BatchPublisher(connection.channel()).publish([callback_message(r) for r in rows])
    return [r.delivery_id for r in rows]


def delivered(engine: Engine, delivery_ids: list[str]) -> int:
    with engine.connect() as conn:
        query = sa.text(
            "SELECT COUNT(*) FROM callback_deliveries WHERE status = 'DELIVERED' "
            "AND delivery_id IN :ids"
        ).bindparams(sa.bindparam("ids", expanding=True))
        return int(conn.execute(query, {"ids": delivery_ids}).scalar_one())


def attempt_rows(engine: Engine, delivery_ids: list[str]) -> int:
    with engine.connect() as conn:
        query = sa.text(
            "SELECT COUNT(*) FROM callback_attempts a JOIN callback_deliveries d "
            "ON a.delivery_pk = d.id WHERE d.delivery_id IN :ids"
        ).bindparams(sa.bindparam("ids", expanding=True))
        return int(conn.execute(query, {"ids": delivery_ids}).scalar_one())


def parked() -> float:
    found = REGISTRY.get_sample_value("kairos_callbacks_deferred_total", {"reason": "backlog"})
    return found or 0.0


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> float:
    """Poll ``check`` until it holds; the seconds it took."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > seconds:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(0.1)
    return time.monotonic() - began


def assert_books(engine: Engine, receiver: ScriptedReceiver, ids: list[str]) -> None:
    """Every delivery DELIVERED, one attempt row each, each webhook-id posted once."""
    assert delivered(engine, ids) == len(ids)
    assert attempt_rows(engine, ids) == len(ids), "one attempt each: none sent twice"
    posted = [a.headers["webhook-id"] for a in receiver.arrivals]
    assert sorted(posted) == sorted(ids), "each callback posted once"


@pytest.fixture
def receivers() -> Iterator[tuple[ScriptedReceiver, ScriptedReceiver]]:
    pair = ScriptedReceiver(), ScriptedReceiver()
    yield pair
    for receiver in pair:
        receiver.close()


def test_a_burst_to_a_fast_receiver_is_not_parked_and_another_apps_callbacks_follow_it(
    engine: Engine,
    connection: BlockingConnection,
    notifier: None,
    receivers: tuple[ScriptedReceiver, ScriptedReceiver],
) -> None:
    bursting, other = app_pk(engine, "bursting"), app_pk(engine, "other")
    before = parked()
    burst = send_many(engine, connection, bursting, receivers[0].url, BURST)
    others = send_many(engine, connection, other, receivers[1].url, OTHERS)
    everything = burst + others
    seconds = wait_for(lambda: delivered(engine, everything) == len(everything), 120, "all")
    print(f"{len(everything)} callbacks delivered in {seconds:.1f} s")
    assert parked() == before, "a burst whose line moves waits unparked"
    assert_books(engine, receivers[0], burst)
    assert_books(engine, receivers[1], others)


def test_a_burst_to_a_slow_receiver_is_parked_and_another_apps_callbacks_arrive_promptly(
    engine: Engine, connection: BlockingConnection, notifier: None
) -> None:
    slow, fast = ScriptedReceiver(delay_seconds=0.5), ScriptedReceiver()
    try:
        bursting, other = app_pk(engine, "bursting"), app_pk(engine, "other")
        before = parked()
        burst = send_many(engine, connection, bursting, slow.url, BURST)
        others = send_many(engine, connection, other, fast.url, OTHERS)
        seconds = wait_for(
            lambda: delivered(engine, others) == OTHERS,
            OTHERS_WITHIN_SECONDS,
            "the other app's callbacks behind the slow burst",
        )
        left = BURST - delivered(engine, burst)
        print(f"others delivered in {seconds:.1f} s; {left} of the burst still to go")
        assert left > BURST // 2, "the others did not wait for the burst to drain"
        assert parked() > before, "the stalled burst was parked past its bound"
        assert_books(engine, fast, others)
    finally:
        slow.close()
        fast.close()
