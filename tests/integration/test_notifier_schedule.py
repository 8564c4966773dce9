"""The notifier against real local receivers, on the real broker: the retry schedule
followed (scaled down), 410 dead at once, Retry-After honoured, redirects failures,
DEAD after the last tier with why in its headers, every attempt signed and verifiable
with the standardwebhooks package under one webhook-id."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from pika.exceptions import ChannelClosedByBroker
from sqlalchemy.engine import Engine
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from common.clock import ClusterClock
from common.config import NotifierSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.topology import CALLBACKS_DEAD_QUEUE, retry_queue
from services.notifier.main import _serve, notifier_parts
from services.notifier.posting import CallbackPoster
from tests.integration.notifier_helpers import (
    app,
    attempts,
    notifier,
    row,
    send,
    verify_all,
    wait_for_status,
)
from tests.integration.receivers import LOCAL_RECEIVERS, Answer, ScriptedReceiver

__all__ = ["app", "notifier"]  # fixtures


def test_a_receiver_failing_twice_gets_it_on_the_schedule_signed_under_one_id(
    engine: Engine, connection: BlockingConnection, notifier: None, app: AppCredentials
) -> None:
    receiver = ScriptedReceiver([Answer(500), Answer(302, (("location", "/elsewhere"),))])
    try:
        delivery_id = send(engine, connection, receiver.url)
        wait_for_status(engine, delivery_id, "DELIVERED", 30)
    finally:
        receiver.close()
    assert len(receiver.arrivals) == 3, "the redirect is a failure, not followed"
    assert verify_all(receiver, app.signing_secret) == {delivery_id}
    gaps = [b.at - a.at for a, b in zip(receiver.arrivals, receiver.arrivals[1:], strict=False)]
    # Tiers 1 s and 2 s, each jittered a fifth either side: never earlier than that
    # (later is the machine's load, not asserted).
    assert gaps[0] >= 0.75 and gaps[1] >= 1.55, gaps
    recorded = attempts(engine, delivery_id)
    assert [a.status_code for a in recorded] == [500, 302, 204]
    assert [a.attempt for a in recorded] == [1, 2, 3]
    assert all(a.duration_ms >= 0 for a in recorded)
    assert row(engine, delivery_id).next_attempt_at is None


def dead_message(connection: BlockingConnection) -> tuple[dict[str, object], bytes]:
    channel = connection.channel()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(CALLBACKS_DEAD_QUEUE, auto_ack=True)
        if method is not None:
            return dict(properties.headers or {}), body
        time.sleep(0.1)
    raise AssertionError("nothing in the dead queue")


def test_410_is_dead_at_once_with_why_in_the_dead_letters_headers(
    engine: Engine, connection: BlockingConnection, notifier: None, app: AppCredentials
) -> None:
    receiver = ScriptedReceiver([Answer(410)])
    try:
        delivery_id = send(engine, connection, receiver.url)
        wait_for_status(engine, delivery_id, "DEAD", 30)
        time.sleep(1.5)
    finally:
        receiver.close()
    assert len(receiver.arrivals) == 1
    assert row(engine, delivery_id).dead_reason == "gone"
    headers, _ = dead_message(connection)
    assert headers["x-kairos-dead-reason"] == "gone"
    assert headers["x-kairos-last-status"] == 410
    assert headers["x-kairos-attempts"] == 1


def test_dead_after_the_last_tier(
    engine: Engine, connection: BlockingConnection, notifier: None, app: AppCredentials
) -> None:
    receiver = ScriptedReceiver([Answer(500)] * 5)
    try:
        delivery_id = send(engine, connection, receiver.url)
        wait_for_status(engine, delivery_id, "DEAD", 30)
    finally:
        receiver.close()
    assert len(receiver.arrivals) == 3, "the first attempt and one per tier"
    assert row(engine, delivery_id).dead_reason == "exhausted"
    headers, _ = dead_message(connection)
    assert headers["x-kairos-attempts"] == 3
    assert headers["x-kairos-last-status"] == 500


@pytest.mark.parametrize("code", [429, 503])
def test_retry_after_is_waited_for_instead_of_the_tier(
    engine: Engine,
    connection: BlockingConnection,
    notifier: None,
    app: AppCredentials,
    code: int,
) -> None:
    receiver = ScriptedReceiver([Answer(code, (("retry-after", "5"),))])
    try:
        delivery_id = send(engine, connection, receiver.url)
        deadline = time.monotonic() + 5
        while not attempts(engine, delivery_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        retrying = row(engine, delivery_id)
        assert retrying.status == "RETRYING"
        (first,) = attempts(engine, delivery_id)
        assert retrying.next_attempt_at - first.attempted_at == 5_000, "asked 5 s, not the 1 s tier"
        wait_for_status(engine, delivery_id, "DELIVERED", 30)
    finally:
        receiver.close()
    gap = receiver.arrivals[1].at - receiver.arrivals[0].at
    assert gap >= 4.9, gap


def test_a_retry_queue_deleted_under_the_notifier_loses_no_callback(
    namespace: StoreSettings,
    engine: Engine,
    connection: BlockingConnection,
    redis_client: redis.Redis,
    app: AppCredentials,
) -> None:
    settings = NotifierSettings(
        namespace=namespace.namespace, retry_tiers_seconds="1", retry_jitter=0
    )
    poster = CallbackPoster(3, policy=LOCAL_RECEIVERS)
    poster.start()
    parts = notifier_parts(settings, engine, poster, ClusterClock(redis_client))
    stop = threading.Event()
    thread = threading.Thread(target=_serve, args=(settings, parts, stop), daemon=True)
    thread.start()
    receiver = ScriptedReceiver([Answer(500)])
    try:
        channel = connection.channel()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                connection.channel().queue_declare(retry_queue(1000), passive=True)
                break
            except ChannelClosedByBroker:
                time.sleep(0.1)
        channel.queue_delete(retry_queue(1000))
        delivery_id = send(engine, connection, receiver.url)
        wait_for_status(engine, delivery_id, "DELIVERED", 30)
    finally:
        stop.set()
        thread.join(timeout=30)
        poster.close()
        receiver.close()
    assert len(receiver.arrivals) == 2


def test_while_a_secret_rotates_receivers_holding_either_secret_verify(
    engine: Engine,
    connection: BlockingConnection,
    redis_client: redis.Redis,
    notifier: None,
    app: AppCredentials,
) -> None:
    now = ClusterClock(redis_client).now_ms()
    with MySqlAppTransactions(engine).transaction() as apps:
        new_secret = apps.rotate_signing_secret(app.app_id, now, now + 3_600_000)
    assert new_secret is not None
    receiver = ScriptedReceiver()
    try:
        delivery_id = send(engine, connection, receiver.url)
        wait_for_status(engine, delivery_id, "DELIVERED", 30)
    finally:
        receiver.close()
    (arrival,) = receiver.arrivals
    assert len(arrival.headers["webhook-signature"].split()) == 2, "signed with both"
    for secret in (app.signing_secret, new_secret):
        Webhook(secret).verify(arrival.body, arrival.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(arrival.body, arrival.headers)
