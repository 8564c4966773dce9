"""The notifier starts its next attempts on its event loop: while its consumer's
connection thread is held up (a slow broker round trip, a long flush), the callbacks it
already took are still posted, one after another as POSTs end; they are acked once the
thread is free again, and the books balance (each delivered once, one attempt each,
each webhook-id posted once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import NotifierSettings, StoreSettings
from common.db.apps import AppCredentials
from common.keys import RedisKeys
from common.topology import CALLBACKS_QUEUE
from services.notifier.main import _serve, notifier_parts
from services.notifier.posting import CallbackPoster
from services.notifier.scheduler import AttemptScheduler
from services.notifier.standing import StandingReporter, WaitingCounts
from tests.integration.notifier_helpers import TIERS, app, send, verify_all, wait_for_status
from tests.integration.receivers import LOCAL_RECEIVERS, ScriptedReceiver
from tests.integration.test_notifier_tasks import attempt_count

__all__ = ["app"]  # fixture

CALLBACKS = 24
DELAY = 0.3


class HoldingReporter(StandingReporter):
    """A standing reporter that holds the consumer's thread, which calls it between its
    broker polls, while ``hold`` is set and ``release`` is not."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, clock: ClusterClock) -> None:
        super().__init__(client, keys, clock.now_ms)
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()

    def maybe_report(self, scheduler: AttemptScheduler, line: WaitingCounts) -> None:
        """Hold the calling thread while asked to."""
        if self.hold.is_set() and not self.release.is_set():
            self.held.set()
            self.release.wait(60)
        super().maybe_report(scheduler, line)


@pytest.fixture
def receiver() -> Iterator[ScriptedReceiver]:
    slow = ScriptedReceiver(delay_seconds=DELAY)
    yield slow
    slow.close()


@pytest.fixture
def held_notifier(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> Iterator[HoldingReporter]:
    """A notifier in a thread whose consumer's thread the test can hold up."""
    settings = NotifierSettings(
        namespace=namespace.namespace,
        retry_tiers_seconds=TIERS,
        request_timeout_seconds=3,
        secret_cache_seconds=0,
        concurrency=8,
    )
    poster = CallbackPoster(settings.request_timeout_seconds, policy=LOCAL_RECEIVERS)
    poster.start()
    clock = ClusterClock(redis_client)
    reporter = HoldingReporter(redis_client, RedisKeys(namespace.namespace), clock)
    parts = replace(notifier_parts(settings, engine, poster, clock), reporter=reporter)
    stop = threading.Event()
    thread = threading.Thread(target=_serve, args=(settings, parts, stop), daemon=True)
    thread.start()
    yield reporter
    reporter.release.set()
    stop.set()
    thread.join(timeout=30)
    reporter.close()
    poster.close()


def wait_until_taken(connection: BlockingConnection, seconds: float) -> None:
    """Wait until the notifier holds every callback message (none ready in the queue)."""
    channel = connection.channel()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if channel.queue_declare(CALLBACKS_QUEUE, passive=True).method.message_count == 0:
            return
        time.sleep(0.05)
    raise AssertionError("the notifier did not take the callbacks")


def test_posts_go_on_while_the_consumers_thread_is_held_and_the_books_balance(
    engine: Engine,
    connection: BlockingConnection,
    app: AppCredentials,
    receiver: ScriptedReceiver,
    held_notifier: HoldingReporter,
) -> None:
    sent = [send(engine, connection, receiver.url) for _ in range(CALLBACKS)]
    wait_until_taken(connection, 30)
    held_notifier.hold.set()
    assert held_notifier.held.wait(10), "the consumer's thread came to the reporter"
    posted_by_then = len(receiver.arrivals)

    # A few attempts at a time, DELAY each: all of them take ~1 s on the loop alone; a
    # notifier whose next attempt waited for the consumer's thread would stop here.
    deadline = time.monotonic() + 20
    while len(receiver.arrivals) < CALLBACKS and time.monotonic() < deadline:
        time.sleep(0.05)
    posted_while_held = len(receiver.arrivals)
    held_notifier.release.set()

    assert posted_while_held == CALLBACKS, (
        f"{posted_by_then} posted when the thread was held, {posted_while_held} while held"
    )
    for delivery_id in sent:
        wait_for_status(engine, delivery_id, "DELIVERED", 30)
    ids = verify_all(receiver, app.signing_secret)
    assert ids == set(sent) and len(receiver.arrivals) == CALLBACKS, "each posted once"
    assert attempt_count(engine, sent) == CALLBACKS, "one attempt recorded each"
