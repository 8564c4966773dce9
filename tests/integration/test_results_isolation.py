"""One result that cannot be recorded settles alone; the rest of its batch is recorded."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import pytest
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import OutgoingMessage
from common.config import StoreSettings
from common.topology import RESULTS_DEAD_QUEUE
from services.dispatcher.outcomes import results_thread
from tests.books import Expectation, assert_books
from tests.e2e.harness import wait_until
from tests.integration.results_helpers import publish_bodies, publish_results, queued_jobs

SET_ASIDE_DELAY_S = 0.5


def raw_result(job_id: int, message: str, worker_id: str = "w1") -> bytes:
    """A results message written by hand: JSON can carry what Python objects cannot."""
    return (
        f'{{"v":1,"worker_id":"w1","results":[{{"v":1,"execution_id":"e-{job_id}",'
        f'"job_id":{job_id},"worker_id":"{worker_id}","status":"FAILED",'
        f'"message":"{message}","started_at":1100,"ended_at":1200}}]}}'
    ).encode()


def execution(engine: Engine, job_id: int) -> tuple[str, str | None]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT status, message FROM executions WHERE job_id = :j"), {"j": job_id}
        ).one()
    return str(row.status), row.message


def test_a_result_the_database_refuses_settles_alone(
    namespace: StoreSettings, engine: Engine, results_consumer: None
) -> None:
    job_ids = queued_jobs(engine, 20)
    bad = job_ids[7]
    # A worker id longer than its column: valid JSON, but not a row MySQL can store.
    publish_bodies(namespace, [raw_result(bad, "boom", worker_id="w" * 100)])
    publish_results(namespace, [j for j in job_ids if j != bad])
    assert_books(
        engine,
        Expectation([bad], {"FAILED"}, {"FAILED"}, callbacks="recorded"),
        Expectation(
            [j for j in job_ids if j != bad], execution_statuses={"SUCCEEDED"}, callbacks="recorded"
        ),
        timeout=30,
    )
    status, message = execution(engine, bad)
    assert status == "FAILED"
    assert message is not None and "could not record" in message
    assert all(execution(engine, j)[0] == "SUCCEEDED" for j in job_ids if j != bad)


def test_text_utf8_cannot_carry_is_replaced_and_recorded(
    namespace: StoreSettings, engine: Engine, results_consumer: None
) -> None:
    job_ids = queued_jobs(engine, 4)
    publish_bodies(namespace, [raw_result(job_ids[0], "\\udc80 broken")])
    publish_results(namespace, job_ids[1:])
    assert_books(
        engine,
        Expectation(job_ids[:1], {"FAILED"}, {"FAILED"}, callbacks="recorded"),
        Expectation(job_ids[1:], execution_statuses={"SUCCEEDED"}, callbacks="recorded"),
        timeout=30,
    )
    assert execution(engine, job_ids[0]) == ("FAILED", "? broken")


def test_a_trigger_time_no_calendar_can_show_does_not_stop_recording(
    namespace: StoreSettings, engine: Engine, results_consumer: None
) -> None:
    job_ids = queued_jobs(engine, 10)
    odd = job_ids[1]  # odd ones call back
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE executions SET trigger_time = -100000000000000 WHERE job_id = :j"),
            {"j": odd},
        )
    publish_results(namespace, job_ids)
    assert_books(engine, Expectation(job_ids, callbacks="recorded"), timeout=30)
    with engine.connect() as conn:
        payload = conn.execute(
            sa.text("SELECT payload FROM callback_deliveries WHERE job_id = :j"), {"j": odd}
        ).scalar_one()
    assert json.loads(payload)["data"]["triggerTime"] is None


def slow_set_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Delay the set-aside publish past the batch's commit, as a busy broker may: a
    test that reads the dead-letter queue as soon as results are recorded must wait."""
    original = results_thread.set_aside

    def later(bodies: Sequence[bytes]) -> list[OutgoingMessage]:
        time.sleep(SET_ASIDE_DELAY_S)
        return original(bodies)

    monkeypatch.setattr(results_thread, "set_aside", later)


def set_aside_bodies(connection: BlockingConnection) -> list[bytes]:
    """Every body in the results dead-letter queue now, taken out of it."""
    channel = connection.channel()
    bodies: list[bytes] = []
    while True:
        method, _props, body = channel.basic_get(RESULTS_DEAD_QUEUE, auto_ack=True)
        if method is None:
            channel.close()
            return bodies
        bodies.append(body)


def test_an_unreadable_results_message_is_set_aside_not_dropped(
    namespace: StoreSettings,
    engine: Engine,
    connection: BlockingConnection,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    slow_set_aside(monkeypatch)
    job_ids = queued_jobs(engine, 6)
    publish_bodies(namespace, [b"not json at all"])
    publish_results(namespace, job_ids)
    # Started once all are queued, the consumer reads them in one batch: the set-aside
    # publish comes after that batch's commit.
    request.getfixturevalue("results_consumer")
    assert_books(engine, Expectation(job_ids, callbacks="recorded"), timeout=30)
    found: list[bytes] = []

    def parked() -> list[bytes]:
        found.extend(set_aside_bodies(connection))
        return found

    wait_until(parked, 10, what="the unreadable message in the dead-letter queue")
    assert found == [b"not json at all"]
