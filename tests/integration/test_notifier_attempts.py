"""One callback attempt against receivers that misbehave: bounded in time and in what it
reads, and any error is that attempt's failure, never the notifier's."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.callback_urls import CallbackUrlPolicy
from common.clock import ClusterClock
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.messages import CallbackMessage
from common.metrics import CALLBACKS_ORPHANED
from common.topology import CALLBACKS_DEAD_QUEUE
from services.notifier.delivery import CallbackDeliverer
from services.notifier.outages import StoreBackoff
from services.notifier.posting import CallbackPoster
from services.notifier.schedule import RetrySchedule
from tests.integration.results_helpers import queued_jobs

TOTAL_SECONDS = 1.0


class RawReceiver:
    """A TCP server whose every connection is handled by ``serve(conn)``."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}/hook"
        self._serve = serve
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self._server.close()
        for conn in self._open:
            conn.close()


def never_answers(conn: socket.socket) -> None:
    conn.recv(65536)
    time.sleep(30)


def trickles(conn: socket.socket) -> None:
    conn.recv(65536)
    try:
        conn.sendall(b"HTTP/1.1 500 Oops\r\ncontent-length: 100000\r\n\r\n")
        for _ in range(300):
            conn.sendall(b"x")
            time.sleep(0.1)
    except OSError:
        return


def answers_megabytes(conn: socket.socket) -> None:
    conn.recv(65536)
    body = b"y" * 10_000_000
    try:
        conn.sendall(b"HTTP/1.1 503 Busy\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        return


@pytest.fixture
def deliverer(engine: Engine, redis_client: redis.Redis) -> Iterator[CallbackDeliverer]:
    # The receivers listen on this machine.
    poster = CallbackPoster(
        TOTAL_SECONDS, policy=CallbackUrlPolicy.from_settings("127.0.0.0/8", False)
    )
    poster.start()
    yield CallbackDeliverer(engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2]))
    poster.close()


def delivery_to(engine: Engine, url: str) -> bytes:
    """A recorded delivery to ``url``; returns the message that hands it to the notifier."""
    job_id = queued_jobs(engine, 1)[0]
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).insert_deliveries(
            [NewDelivery("msg_1", f"e-{job_id}", job_id, 1, url, "{}")], 0
        )
    return (
        CallbackMessage(delivery_id="msg_1", app_pk=1, url=url, payload="{}")
        .model_dump_json()
        .encode()
    )


def last_error(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.text("SELECT last_error FROM callback_deliveries")).scalar())


@pytest.mark.parametrize("serve", [never_answers, trickles, answers_megabytes])
def test_an_attempt_ends_in_time_whatever_the_receiver_does(
    engine: Engine, deliverer: CallbackDeliverer, serve: Callable[[socket.socket], None]
) -> None:
    receiver = RawReceiver(serve)
    try:
        began = time.monotonic()
        attempt = deliverer.deliver(delivery_to(engine, receiver.url))
        took = time.monotonic() - began
    finally:
        receiver.close()
    assert attempt is not None and not attempt.delivered
    assert attempt.follow_up is not None, "the callback goes to its retry tier"
    assert took < TOTAL_SECONDS + 5, "bounded by the attempt's deadline, not the receiver"
    assert len(last_error(engine)) <= 4096


def test_a_url_the_http_client_cannot_use_is_a_failed_attempt_and_dead_at_once(
    engine: Engine, deliverer: CallbackDeliverer
) -> None:
    attempt = deliverer.deliver(delivery_to(engine, "http://example.com:abc/"))
    assert attempt is not None and not attempt.delivered and attempt.follow_up is not None
    assert attempt.follow_up.routing_key == CALLBACKS_DEAD_QUEUE, "a retry would not heal it"
    assert "cannot be read as a URL" in last_error(engine) and "port" in last_error(engine)


def test_a_callback_message_that_cannot_be_read_is_parked_not_sent_back(
    deliverer: CallbackDeliverer,
) -> None:
    attempt = deliverer.deliver(b"{not a callback")
    assert attempt is not None and attempt.follow_up is not None
    assert attempt.follow_up.routing_key == CALLBACKS_DEAD_QUEUE
    assert attempt.follow_up.body == b"{not a callback"


def test_a_message_whose_delivery_row_was_pruned_is_counted_and_logged_not_sent(
    deliverer: CallbackDeliverer, caplog: pytest.LogCaptureFixture
) -> None:
    before = CALLBACKS_ORPHANED._value.get()
    body = CallbackMessage(delivery_id="msg_gone", app_pk=1, url="http://x/", payload="{}")
    assert deliverer.deliver(body.model_dump_json().encode()) is None
    assert CALLBACKS_ORPHANED._value.get() == before + 1
    assert any("no longer exists" in r.getMessage() for r in caplog.records)


def _noting(pauses: list[float]) -> Callable[[float], Awaitable[None]]:
    """A pause that only notes how long it would have been."""

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    return pause


def test_mysql_out_of_reach_makes_the_notifier_wait_longer_each_time_not_spin(
    redis_client: redis.Redis,
) -> None:
    unreachable = sa.create_engine("mysql+pymysql://root@127.0.0.1:1/kairos")
    pauses: list[float] = []
    poster = CallbackPoster(TOTAL_SECONDS)
    poster.start()
    deliverer = CallbackDeliverer(
        unreachable,
        poster,
        ClusterClock(redis_client),
        RetrySchedule([1]),
        backoff=StoreBackoff(sleep=_noting(pauses)),
    )
    body = CallbackMessage(delivery_id="msg_1", app_pk=1, url="http://x/", payload="{}")
    try:
        for _ in range(4):
            with pytest.raises(sa.exc.OperationalError):
                deliverer.deliver(body.model_dump_json().encode())
    finally:
        poster.close()
        unreachable.dispose()
    assert len(pauses) == 4, "a pause before each message goes back to its queue"
    assert pauses[0] <= 1 and pauses[3] >= 4, pauses
