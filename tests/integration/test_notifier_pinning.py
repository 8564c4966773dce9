"""At send time the notifier checks a callback's addresses again and connects to the
address it checked: a name that resolves to a refused address only by then (DNS
rebinding) is refused, and the connection never goes where the check did not look."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.callback_urls import (
    CallbackUrlPolicy,
    SystemResolver,
    TableResolver,
    parse_networks,
)
from common.clock import ClusterClock
from common.db.apps import MySqlAppStore
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.jobs import NewJob, insert_jobs
from common.messages import CallbackMessage
from common.states import DeliveryStatus
from common.topology import CALLBACKS_DEAD_QUEUE
from services.notifier.delivery import CallbackDeliverer
from services.notifier.posting import CallbackPoster
from services.notifier.schedule import RetrySchedule
from tests.integration.helpers import make_app
from tests.integration.test_notifier_attempts import delivery_to

HOST = "hooks.example.com"
PUBLIC = "93.184.215.14"


def read_request(conn: socket.socket) -> bytes:
    """The head of one request, its body read too (closing with it unread would reset
    the connection before the client reads the answer)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    lengths = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
    wanted = int(lengths[0].split(b":")[1]) if lengths else 0
    while len(body) < wanted:
        body += conn.recv(65536)
    return head


class Receiver:
    """An HTTP receiver on 127.0.0.1 answering 204, keeping each request's head."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._tls = tls
        self.heads: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            if self._tls is not None:
                try:
                    conn = self._tls.wrap_socket(conn, server_side=True)
                except OSError:  # ssl.SSLError too: a client that refused the certificate
                    continue
            with conn:
                self.heads.append(read_request(conn))
                conn.sendall(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver()
    yield started
    started.close()


def poster_for(resolver: TableResolver, allowed: str = "") -> CallbackPoster:
    policy = CallbackUrlPolicy.from_settings(allowed, False)
    poster = CallbackPoster(2.0, policy=policy, resolver=resolver)
    poster.start()
    return poster


def delivery_status(engine: Engine) -> tuple[str, str]:
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT status, last_error FROM callback_deliveries")).one()
    return str(row.status), str(row.last_error)


def test_a_name_that_resolves_to_a_refused_address_at_send_time_is_refused_and_dead(
    engine: Engine, redis_client: redis.Redis, receiver: Receiver
) -> None:
    # Public when the job was submitted; the name's DNS answers loopback by send time.
    resolver = TableResolver({HOST: [PUBLIC]})
    resolver.table[HOST] = ["127.0.0.1"]
    poster = poster_for(resolver)
    try:
        deliverer = CallbackDeliverer(
            engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2])
        )
        attempt = deliverer.deliver(delivery_to(engine, f"http://{HOST}:{receiver.port}/h"))
    finally:
        poster.close()
    assert attempt is not None and attempt.follow_up is not None
    assert attempt.follow_up.routing_key == CALLBACKS_DEAD_QUEUE, "no retry: it would not heal"
    status, error = delivery_status(engine)
    assert status == DeliveryStatus.DEAD
    assert "loopback" in error and "KAIROS_CALLBACK_ALLOWED_NETWORKS" in error
    with engine.connect() as conn:
        reason = conn.execute(sa.text("SELECT dead_reason FROM callback_deliveries")).scalar()
    assert reason == "refused"
    assert attempt.follow_up.headers is not None
    assert attempt.follow_up.headers["x-kairos-dead-reason"] == "refused"
    assert receiver.heads == [], "nothing reached the receiver"
    assert poster.backend.connected == []


def test_a_name_that_does_not_resolve_at_send_time_is_retried_not_dead(
    engine: Engine, redis_client: redis.Redis
) -> None:
    poster = poster_for(TableResolver())
    try:
        deliverer = CallbackDeliverer(
            engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2])
        )
        attempt = deliverer.deliver(delivery_to(engine, f"https://{HOST}/h"))
    finally:
        poster.close()
    assert attempt is not None and attempt.follow_up is not None
    assert attempt.follow_up.routing_key != CALLBACKS_DEAD_QUEUE, "DNS may answer later"
    status, error = delivery_status(engine)
    assert status == DeliveryStatus.RETRYING and "did not resolve" in error


def test_a_literal_refused_address_is_refused_at_send_time_without_a_lookup(
    engine: Engine, redis_client: redis.Redis, receiver: Receiver
) -> None:
    resolver = TableResolver()
    poster = poster_for(resolver)
    try:
        deliverer = CallbackDeliverer(
            engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2])
        )
        deliverer.deliver(delivery_to(engine, f"http://0x7f000001:{receiver.port}/h"))
    finally:
        poster.close()
    assert delivery_status(engine)[0] == DeliveryStatus.DEAD
    assert receiver.heads == [] and resolver.asked == []


def test_the_connection_goes_to_the_checked_address_and_keeps_the_host_name(
    receiver: Receiver,
) -> None:
    # The name exists only in this resolver: reaching the receiver proves the client
    # connected to the address the check returned rather than resolving again.
    resolver = TableResolver({HOST: ["127.0.0.1"]})
    poster = poster_for(resolver, allowed="127.0.0.0/8")
    try:
        outcome = poster.post(f"http://{HOST}:{receiver.port}/h", "{}", {})
    finally:
        poster.close()
    assert outcome.delivered, outcome.error
    assert poster.backend.connected == [(HOST, "127.0.0.1", receiver.port)]
    assert resolver.asked == [HOST], "resolved once, for the check and the connect"
    assert f"host: {HOST}:{receiver.port}".encode() in receiver.heads[0].lower()


def test_every_record_is_checked_one_refused_address_refuses_the_name(
    receiver: Receiver,
) -> None:
    resolver = TableResolver({HOST: ["127.0.0.1", "169.254.169.254"]})
    poster = poster_for(resolver, allowed="127.0.0.0/8")
    try:
        outcome = poster.post(f"http://{HOST}:{receiver.port}/h", "{}", {})
    finally:
        poster.close()
    assert outcome.refused and not outcome.delivered
    # The attempt's error (which the app reads) says why, never the address resolved.
    assert outcome.error is not None and "link-local" in outcome.error
    assert "169.254.169.254" not in outcome.error
    assert receiver.heads == []


def test_receivers_whose_dns_hangs_hold_no_other_receivers_callback(receiver: Receiver) -> None:
    released = threading.Event()

    def getaddrinfo(host: str, port: int, **kwargs: object) -> list[Any]:
        if host.startswith("hang"):
            released.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    policy = CallbackUrlPolicy.from_settings("127.0.0.0/8", False)
    poster = CallbackPoster(2.0, policy=policy, resolver=SystemResolver(2.0, getaddrinfo))
    poster.start()
    try:
        with ThreadPoolExecutor(40) as pool:
            hung = [
                pool.submit(poster.post, f"http://hang{i}.example.com/h", "{}", {})
                for i in range(40)
            ]
            # Forty receivers' DNS hangs; another receiver still gets its callback.
            outcome = poster.post(f"http://{HOST}:{receiver.port}/h", "{}", {})
            released.set()
            assert all(not h.result().delivered for h in hung)
    finally:
        released.set()
        poster.close()
    assert outcome.delivered, outcome.error
    assert len(receiver.heads) == 1


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for HOST (openssl), as the receiver's and the CA."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    names = ["-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}"]
    subprocess.run(
        [*request, "-keyout", str(key), "-out", str(cert), *names],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_a_pinned_https_connection_verifies_the_host_name(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    receiver = Receiver(server_tls)
    resolver = TableResolver({HOST: ["127.0.0.1"]})
    policy = CallbackUrlPolicy.from_settings("127.0.0.0/8", True)
    trusted = ssl.create_default_context(cafile=str(cert))
    poster = CallbackPoster(2.0, policy=policy, resolver=resolver, ssl_context=trusted)
    poster.start()
    try:
        outcome = poster.post(f"https://{HOST}:{receiver.port}/h", "{}", {})
    finally:
        poster.close()
        receiver.close()
    # The certificate names HOST only: verification passed because SNI and the check
    # used the name while the TCP connect went to 127.0.0.1.
    assert outcome.delivered, outcome.error
    assert poster.backend.connected == [(HOST, "127.0.0.1", receiver.port)]


def test_an_apps_own_networks_admit_its_callbacks_at_send_time_and_no_other_apps(
    engine: Engine, redis_client: redis.Redis, receiver: Receiver
) -> None:
    # App 1 may reach loopback, app 2 has no list of its own and the default is public
    # only; both callbacks name the same receiver on 127.0.0.1.
    make_app(engine, "allowed")
    make_app(engine, "other")
    with engine.begin() as conn:
        allowed_id = conn.execute(sa.text("SELECT app_id FROM apps WHERE id = 1")).scalar_one()
        MySqlAppStore(conn).set_callback_networks(str(allowed_id), parse_networks("127.0.0.0/8"))
    url = f"http://{HOST}:{receiver.port}/h"
    poster = poster_for(TableResolver({HOST: ["127.0.0.1"]}))
    try:
        deliverer = CallbackDeliverer(
            engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2])
        )
        first = deliverer.deliver(app_delivery(engine, 1, "msg_a", url))
        second = deliverer.deliver(app_delivery(engine, 2, "msg_b", url))
    finally:
        poster.close()
    assert first is not None and first.delivered
    assert second is not None and not second.delivered
    assert second.follow_up is not None and second.follow_up.routing_key == CALLBACKS_DEAD_QUEUE
    with engine.connect() as conn:
        query = sa.text("SELECT delivery_id, status FROM callback_deliveries")
        rows = {str(row[0]): str(row[1]) for row in conn.execute(query)}
    assert rows == {"msg_a": DeliveryStatus.DELIVERED, "msg_b": DeliveryStatus.DEAD}
    assert len(receiver.heads) == 1, "only the allowed app's callback reached the receiver"


def test_an_app_never_rides_a_connection_another_apps_networks_opened(
    receiver: Receiver,
) -> None:
    resolver = TableResolver({HOST: ["127.0.0.1"]})
    poster = poster_for(resolver)
    url = f"http://{HOST}:{receiver.port}/h"
    try:
        allowed = poster.post(url, "{}", {}, parse_networks("127.0.0.0/8"))
        default = poster.post(url, "{}", {})
    finally:
        poster.close()
    assert allowed.delivered, allowed.error
    assert default.refused and "loopback" in str(default.error)


def app_delivery(engine: Engine, app_pk: int, delivery_id: str, url: str) -> bytes:
    """A recorded delivery of a job of app ``app_pk``, and the message handing it over."""
    with engine.begin() as conn:
        job = NewJob(app_pk, "j", "demo.noop", {}, None, 1_000, url, None, None)
        [job_id] = insert_jobs(conn, [job], 0)
        delivery = NewDelivery(delivery_id, f"e-{job_id}", job_id, app_pk, url, "{}")
        MySqlDeliveryStore(conn).insert_deliveries([delivery], 0)
    message = CallbackMessage(delivery_id=delivery_id, app_pk=app_pk, url=url, payload="{}")
    return message.model_dump_json().encode()
