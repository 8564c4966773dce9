"""The notifier's attempts shared between apps and receiving hosts, on real MySQL: an
app whose receivers hang, or a host that hangs, holds some of them, never all, and its
excess waits in a retry tier."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.deliveries import NewDelivery, insert_deliveries
from common.messages import CallbackMessage
from common.topology import retry_queue
from services.notifier.delivery import CallbackDeliverer
from services.notifier.posting import PostOutcome
from services.notifier.schedule import RetrySchedule
from services.notifier.shares import AppShares, DeliveryShares
from tests.integration.helpers import make_app
from tests.integration.results_helpers import queued_jobs


class HangingPoster:
    """Holds the POSTs of app 1's receiver until released; app 2's answer at once."""

    def __init__(self) -> None:
        self.posted: list[str] = []
        self.hanging = threading.Semaphore(0)
        self.release = threading.Event()

    def post(
        self, url: str, body: str, headers: Mapping[str, str], networks: object = None
    ) -> PostOutcome:
        self.posted.append(url)
        if "/a" in url:
            self.hanging.release()
            self.release.wait(30)
            return PostOutcome(None, "no complete answer")
        return PostOutcome(204, None)


def message(engine: Engine, number: int, app_pk: int, url: str) -> bytes:
    """A recorded delivery of app ``app_pk``; the message that hands it to the notifier."""
    delivery_id = f"msg_{number}"
    with engine.begin() as conn:
        job_id = conn.execute(sa.text("SELECT MIN(id) FROM jobs")).scalar_one()
        row = NewDelivery(delivery_id, f"e-x{number}", job_id, app_pk, url, "{}")
        insert_deliveries(conn, [row], 0)
    callback = CallbackMessage(delivery_id=delivery_id, app_pk=app_pk, url=url, payload="{}")
    return callback.model_dump_json().encode()


def attempts(engine: Engine, delivery_id: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT attempts FROM callback_deliveries WHERE delivery_id = :d"),
                {"d": delivery_id},
            ).scalar_one()
        )


def test_an_app_whose_receiver_hangs_never_takes_every_attempt(
    engine: Engine, redis_client: redis.Redis
) -> None:
    queued_jobs(engine, 1)  # app 1 and a job
    make_app(engine, "b")  # app 2
    poster = HangingPoster()
    shares = DeliveryShares(AppShares(slots=4, share=1), AppShares(slots=4, share=4))
    deliverer = CallbackDeliverer(
        engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2], 0), shares=shares
    )
    hanging = [
        threading.Thread(target=deliverer.deliver, args=(message(engine, n, 1, "http://r/a"),))
        for n in range(3)
    ]
    try:
        for thread in hanging:
            thread.start()
        for _ in hanging:
            assert poster.hanging.acquire(timeout=30)
        # App 1 holds 3 of the 4 attempts: one more would leave none for other apps.
        deferred = deliverer.deliver(message(engine, 3, 1, "http://r/a"))
        assert deferred is not None and deferred.follow_up is not None
        assert deferred.follow_up.routing_key == retry_queue(1000)
        assert CallbackMessage.model_validate_json(deferred.follow_up.body).attempt == 1
        assert attempts(engine, "msg_3") == 0, "a deferral is no attempt"
        other = deliverer.deliver(message(engine, 4, 2, "http://r/b"))
        assert other is not None and other.delivered
        assert poster.posted.count("http://r/a") == 3
    finally:
        poster.release.set()
        for thread in hanging:
            thread.join(timeout=30)
    # Its attempts over, app 1 has its share again.
    again = deliverer.deliver(message(engine, 5, 1, "http://r/a"))
    assert again is not None and attempts(engine, "msg_5") == 1


def test_a_host_that_hangs_never_takes_every_attempt_whatever_the_apps(
    engine: Engine, redis_client: redis.Redis
) -> None:
    queued_jobs(engine, 1)  # app 1 and a job
    make_app(engine, "b")  # app 2
    make_app(engine, "c")  # app 3
    poster = HangingPoster()
    shares = DeliveryShares(AppShares(slots=4, share=4), AppShares(slots=4, share=1))
    deliverer = CallbackDeliverer(
        engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2], 0), shares=shares
    )
    # Two apps post to one host that hangs (a shared integration platform).
    hanging = [
        threading.Thread(
            target=deliverer.deliver, args=(message(engine, n, 1 + n % 2, "http://h/a"),)
        )
        for n in range(3)
    ]
    try:
        for thread in hanging:
            thread.start()
        for _ in hanging:
            assert poster.hanging.acquire(timeout=30)
        deferred = deliverer.deliver(message(engine, 3, 3, "http://h/a2"))
        assert deferred is not None and deferred.follow_up is not None
        assert deferred.follow_up.routing_key == retry_queue(1000), "its host holds 3 of 4"
        assert attempts(engine, "msg_3") == 0
        other = deliverer.deliver(message(engine, 4, 3, "http://elsewhere/b"))
        assert other is not None and other.delivered
    finally:
        poster.release.set()
        for thread in hanging:
            thread.join(timeout=30)
