"""A lock conflict is run again where it happened, counted, and never taken for an
outage: a delivered callback is recorded, not POSTed again; a group of jobs is stored;
the notifier and the results consumer lock deliveries in one order."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pymysql  # type: ignore[import-untyped]
import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from common.callback_urls import CallbackUrlPolicy
from common.clock import ClusterClock
from common.db.deliveries import NewAttempt, NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.messages import CallbackMessage
from common.metrics import STORE_CONFLICTS
from common.states import DeliveryStatus
from services.api import group_insert
from services.api.group_insert import GroupInserter
from services.notifier.delivery import CallbackDeliverer
from services.notifier.outages import StoreBackoff
from services.notifier.posting import CallbackPoster
from services.notifier.schedule import RetrySchedule
from tests.e2e.several import CountingReceiver
from tests.integration.results_helpers import queued_jobs
from tests.integration.test_group_insert import job, new_app, recorder


def deadlock() -> OperationalError:
    orig = pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
    return OperationalError("UPDATE callback_deliveries", {}, orig)


def counted(stage: str) -> float:
    return float(STORE_CONFLICTS.labels(stage=stage)._value.get())


@pytest.fixture
def receiver() -> Iterator[CountingReceiver]:
    server = CountingReceiver()
    yield server
    server.close()


async def _no_pause(_seconds: float) -> None:
    return None


@pytest.fixture
def deliverer(engine: Engine, redis_client: redis.Redis) -> Iterator[CallbackDeliverer]:
    poster = CallbackPoster(5.0, policy=CallbackUrlPolicy.from_settings("127.0.0.0/8", False))
    poster.start()
    # A pause after an outage would only slow the test: none is expected.
    backoff = StoreBackoff(sleep=_no_pause)
    yield CallbackDeliverer(
        engine, poster, ClusterClock(redis_client), RetrySchedule([1, 2]), backoff=backoff
    )
    poster.close()


def delivery_to(engine: Engine, url: str) -> bytes:
    job_id = queued_jobs(engine, 1)[0]
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).insert_deliveries(
            [NewDelivery("msg_1", f"e-{job_id}", job_id, 1, url, "{}")], 0
        )
    message = CallbackMessage(delivery_id="msg_1", app_pk=1, url=url, payload="{}")
    return message.model_dump_json().encode()


def status_of(engine: Engine, delivery_id: str) -> str:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT status FROM callback_deliveries WHERE delivery_id = :d"),
            {"d": delivery_id},
        )
        return str(found.scalar_one())


def test_a_delivered_post_whose_record_meets_deadlocks_is_recorded_not_posted_again(
    engine: Engine,
    deliverer: CallbackDeliverer,
    receiver: CountingReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = delivery_to(engine, receiver.url)
    real = MySqlDeliveryStore.record_attempts
    conflicts = [deadlock() for _ in range(8)]  # more than a bounded retry would take

    def record_attempts(
        store: MySqlDeliveryStore, records: Sequence[NewAttempt], now_ms: int
    ) -> None:
        if conflicts:
            raise conflicts.pop()
        real(store, records, now_ms)

    monkeypatch.setattr(MySqlDeliveryStore, "record_attempts", record_attempts)
    before = counted("callback_attempt")
    attempt = deliverer.deliver(body)
    assert attempt is not None and attempt.delivered and attempt.follow_up is None
    assert status_of(engine, "msg_1") == DeliveryStatus.DELIVERED
    assert counted("callback_attempt") - before == 8
    # The same message redelivered (a copy sent back, say) is dropped, not POSTed.
    assert deliverer.deliver(body) is None
    assert list(receiver.posts.values()) == [1]


def test_a_group_insert_that_meets_a_deadlock_stores_every_job(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    app_pk = new_app(engine)
    real = group_insert.store_group
    conflicts = [deadlock()]

    def store_group(conn: Connection, jobs: Any, now_ms: int) -> Any:
        if conflicts:
            raise conflicts.pop()
        return real(conn, jobs, now_ms)

    monkeypatch.setattr(group_insert, "store_group", store_group)
    inserter = GroupInserter(engine, recorder([]))
    before = counted("api_insert")
    futures = [inserter.submit(job(app_pk, f"j{n}"), 1_000) for n in range(20)]
    ids = {f.result(timeout=30).job_id for f in futures}
    inserter.stop()
    assert len(ids) == 20
    assert counted("api_insert") - before == 1


ROUNDS = 12
BATCH = 40


def test_notifier_records_and_results_marks_on_the_same_deliveries_never_deadlock(
    engine: Engine,
) -> None:
    """A results consumer marks a batch QUEUED while the notifier records attempts of
    the same deliveries, with no retry at all: the row locks are taken in one order."""
    job_ids = queued_jobs(engine, ROUNDS * BATCH)
    errors: list[BaseException] = []
    for round_ in range(ROUNDS):
        jobs = job_ids[round_ * BATCH : (round_ + 1) * BATCH]
        ids = [f"msg_{round_}_{n:03d}" for n in range(BATCH)]
        rows = [
            NewDelivery(d, f"e-{j}", j, 1, "http://x/", "{}")
            for d, j in zip(ids, jobs, strict=True)
        ]
        with engine.begin() as conn:
            MySqlDeliveryStore(conn).insert_deliveries(rows, 0)
        barrier = threading.Barrier(2)

        def mark(ids: list[str] = ids, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                with engine.begin() as conn:
                    MySqlDeliveryStore(conn).confirm_queued(ids, 5)
            except BaseException as e:
                errors.append(e)

        def record(ids: list[str] = ids, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            for delivery_id in reversed(ids):
                attempt = NewAttempt(delivery_id, 1, DeliveryStatus.DELIVERED, 204, None, 1)
                try:
                    with engine.begin() as conn:
                        MySqlDeliveryStore(conn).record_attempts([attempt], 6)
                except BaseException as e:
                    errors.append(e)

        threads = [threading.Thread(target=mark), threading.Thread(target=record)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
