"""Callback attempts are tasks on the notifier's event loop, not a thread each: a burst
of slow callbacks is posted at once by the notifier's one loop, no posting thread is
made, the store work stays in its few threads, and the books balance (every callback
delivered once, every attempt, failed ones too, recorded)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.db.apps import AppCredentials
from services.notifier.delivery import STORE_THREADS
from tests.integration.notifier_helpers import app, notifier, send, verify_all, wait_for_status
from tests.integration.receivers import Answer, ScriptedReceiver

__all__ = ["app", "notifier"]  # fixtures

CALLBACKS = 24
FAILING = 4  # the first answers are 500s: those callbacks come back through a retry tier
DELAY = 0.5


class ThreadNames:
    """Every thread name seen in this process while it runs, sampled every 20 ms; threads
    already there when it starts (left by earlier tests in the same process) are not
    counted."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.most_stores = 0
        self._before = {t.ident for t in threading.enumerate()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            names = [t.name for t in threading.enumerate() if t.ident not in self._before]
            self.seen.update(names)
            self.most_stores = max(self.most_stores, sum(n.startswith("store") for n in names))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def slow_receiver() -> Iterator[ScriptedReceiver]:
    receiver = ScriptedReceiver([Answer(500)] * FAILING, delay_seconds=DELAY)
    yield receiver
    receiver.close()


def attempt_count(engine: Engine, delivery_ids: list[str]) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT COUNT(*) FROM callback_attempts a JOIN callback_deliveries d "
                    "ON a.delivery_pk = d.id WHERE d.delivery_id IN :ids"
                ).bindparams(sa.bindparam("ids", expanding=True)),
                {"ids": delivery_ids},
            ).scalar_one()
        )


def test_a_burst_of_slow_callbacks_runs_as_tasks_on_one_loop_and_the_books_balance(
    engine: Engine,
    connection: BlockingConnection,
    app: AppCredentials,
    notifier: None,
    slow_receiver: ScriptedReceiver,
) -> None:
    names = ThreadNames()
    began = time.monotonic()
    sent = [send(engine, connection, slow_receiver.url) for _ in range(CALLBACKS)]
    try:
        for delivery_id in sent:
            wait_for_status(engine, delivery_id, "DELIVERED", 30)
    finally:
        names.stop()
    took = time.monotonic() - began

    assert not {n for n in names.seen if n.startswith("run")}, "no thread per attempt"
    assert names.most_stores <= STORE_THREADS
    # One at a time, the slow answers alone would take CALLBACKS x DELAY (12 s).
    first = min(a.at for a in slow_receiver.arrivals)
    together = [a for a in slow_receiver.arrivals if a.at - first < DELAY * 0.8]
    assert len(together) >= 3, "attempts overlap on the loop"
    assert took < CALLBACKS * DELAY
    # The books: each callback delivered, its webhook-id the same on every attempt;
    # every attempt the receiver saw recorded, the failed ones too.
    ids = verify_all(slow_receiver, app.signing_secret)
    assert ids == set(sent)
    assert len(slow_receiver.arrivals) == CALLBACKS + FAILING
    assert attempt_count(engine, sent) == CALLBACKS + FAILING
