"""A burst of attempts whose POSTs end while a record is being written is recorded in
one statement set after it, not in batches of 64 one after another (which left hundreds
of posted callbacks waiting for their records and acks); the books balance."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import wait

from sqlalchemy.engine import Engine

from common.db.apps import AppCredentials
from common.messages import CallbackMessage
from services.notifier.delivery import CallbackDeliverer, PendingRecord
from services.notifier.pending import read_pending
from services.notifier.shares import ShareKeys
from tests.integration.notifier_helpers import app, deliverer, receiver, record, row
from tests.integration.receivers import ScriptedReceiver
from tests.integration.test_notifier_tasks import attempt_count

__all__ = ["app", "deliverer", "receiver"]  # fixtures

CALLBACKS = 300


class HeldFirstBatch:
    """Wraps the deliverer's record writer: the first batch waits until released, so
    the records of the POSTs that end meanwhile gather behind it; every batch's size is
    kept."""

    def __init__(self, write: Callable[[Sequence[PendingRecord]], Sequence[None]]) -> None:
        self.write = write
        self.sizes: list[int] = []
        self.first_began = threading.Event()
        self.release = threading.Event()

    def __call__(self, pending: Sequence[PendingRecord]) -> Sequence[None]:
        self.sizes.append(len(pending))
        if len(self.sizes) == 1:
            self.first_began.set()
            assert self.release.wait(30)
        return self.write(pending)


def test_a_burst_posted_during_a_record_is_recorded_in_one_batch_after_it(
    engine: Engine, app: AppCredentials, receiver: ScriptedReceiver, deliverer: CallbackDeliverer
) -> None:
    held = HeldFirstBatch(deliverer._records._serve)
    deliverer._records._serve = held
    deliveries = [record(engine, receiver.url) for _ in range(CALLBACKS)]
    bodies = [callback_body(d.delivery_id, d.job_id, receiver.url) for d in deliveries]
    first = deliverer.start_pending(read_pending(bodies[0], ShareKeys()), counted=False)
    assert held.first_began.wait(10)
    rest = [
        deliverer.start_pending(read_pending(b, ShareKeys()), counted=False) for b in bodies[1:]
    ]
    deadline = time.monotonic() + 30
    while len(receiver.arrivals) < CALLBACKS and time.monotonic() < deadline:
        time.sleep(0.02)
    held.release.set()
    done, _ = wait([first, *rest], timeout=30)
    assert len(done) == CALLBACKS

    assert held.sizes[0] == 1 and held.sizes[1] == CALLBACKS - 1, held.sizes
    sent = [d.delivery_id for d in deliveries]
    assert all(row(engine, d).status == "DELIVERED" for d in sent)
    assert attempt_count(engine, sent) == CALLBACKS, "one attempt recorded each"
    assert len(receiver.arrivals) == CALLBACKS


def callback_body(delivery_id: str, job_id: int | None, url: str) -> bytes:
    """The callbacks queue's message for a delivery recorded by ``record``."""
    message = CallbackMessage(
        delivery_id=delivery_id, app_pk=1, url=url, payload="{}", job_id=job_id
    )
    return message.model_dump_json().encode()
