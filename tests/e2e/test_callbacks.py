"""Callbacks through the notifier: retry tiers, dead letters, replay."""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import (
    Api,
    CallbackReceiver,
    Processes,
    connect_api,
    free_port,
    wait_until,
)


def start_stack(processes: Processes) -> Api:
    port = free_port()
    processes.start("up", "up", "--port", str(port), "--workers", "1")
    return connect_api(processes, port)


def delivery(engine: Engine) -> dict[str, object]:
    with engine.connect() as conn:
        row = (
            conn.execute(
                sa.text("SELECT status, attempts, last_status_code FROM callback_deliveries")
            )
            .mappings()
            .first()
        )
    return dict(row) if row else {}


def test_failed_callback_is_retried_until_the_receiver_takes_it(
    processes: Processes, engine: Engine
) -> None:
    receiver = CallbackReceiver(statuses=[500, 503])
    try:
        api = start_stack(processes)
        body = {"jobName": "cb", "jobHandler": "demo.noop", "callbackUrl": receiver.url}
        job_id = api.post_job(body).json()["jobId"]
        wait_until(lambda: delivery(engine).get("status") == "DELIVERED", 30, what="delivery")
        assert len(receiver.received) == 3
        ids = {r.headers["webhook-id"] for r in receiver.received}
        assert len(ids) == 1, "every attempt carries the same webhook-id"
        assert delivery(engine)["attempts"] == 3
        expected = Expectation([job_id], execution_statuses={"SUCCEEDED"})
        assert assert_books(engine, expected, timeout=30).deliveries == 1
    finally:
        receiver.close()


def test_undeliverable_callback_parks_in_dead_letters_and_replays(
    processes: Processes, engine: Engine
) -> None:
    receiver = CallbackReceiver(statuses=[500, 500, 500])
    try:
        api = start_stack(processes)
        body = {"jobName": "cb", "jobHandler": "demo.noop", "callbackUrl": receiver.url}
        job_id = api.post_job(body).json()["jobId"]
        wait_until(lambda: delivery(engine).get("status") == "DEAD", 30, what="dead letter")
        assert len(receiver.received) == 3, "1 attempt + 2 retry tiers"
        assert delivery(engine)["last_status_code"] == 500
        refused = Expectation([job_id], execution_statuses={"SUCCEEDED"}, callbacks="dead")
        assert_books(engine, refused, timeout=0)
        output = processes.run("callbacks", "replay", "--all-dead")
        assert "replayed 1" in output
        wait_until(lambda: delivery(engine).get("status") == "DELIVERED", 30, what="replay")
        assert json.loads(receiver.received[-1].body)["data"]["status"] == "SUCCEEDED"
        replayed = Expectation([job_id], execution_statuses={"SUCCEEDED"})
        assert assert_books(engine, replayed, timeout=30).deliveries == 1
    finally:
        receiver.close()


def test_a_local_receiver_is_refused_unless_allowed(processes: Processes, engine: Engine) -> None:
    """Without KAIROS_CALLBACK_ALLOWED_NETWORKS the API refuses a URL reaching this
    machine, in whichever form it is written, and says which setting admits it."""
    port = free_port()
    unset = {"KAIROS_CALLBACK_ALLOWED_NETWORKS": ""}
    processes.start("up", "up", "--port", str(port), "--workers", "1", **unset)
    api = connect_api(processes, port)
    for url in ("http://127.0.0.1:9/h", "http://0x7f000001:9/h", "http://[::ffff:127.0.0.1]/h"):
        response = api.post_job({"jobName": "cb", "jobHandler": "demo.noop", "callbackUrl": url})
        assert response.status_code == 422, response.text
        [error] = response.json()["errors"]
        assert error["field"] == "callbackUrl"
        assert "KAIROS_CALLBACK_ALLOWED_NETWORKS" in error["message"]
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT COUNT(*) FROM jobs WHERE callback_url IS NOT NULL"))
        assert stored.scalar_one() == 0


def test_a_url_refused_at_send_time_is_dead_after_one_attempt(
    processes: Processes, engine: Engine
) -> None:
    """The API admits the local receiver, the notifier does not: the notifier's own check
    refuses it, nothing is sent, and the delivery is dead at once (no retry)."""
    receiver = CallbackReceiver(statuses=[])
    try:
        processes.start("d", "dispatcher")
        processes.start("w1", "worker", "--id", "w1")
        processes.start("n", "notifier", KAIROS_CALLBACK_ALLOWED_NETWORKS="")
        port = free_port()
        processes.start("api", "api", "--port", str(port))
        api = connect_api(processes, port)
        body = {"jobName": "cb", "jobHandler": "demo.noop", "callbackUrl": receiver.url}
        assert api.post_job(body).status_code == 202
        wait_until(lambda: delivery(engine).get("status") == "DEAD", 30, what="dead delivery")
        assert delivery(engine)["attempts"] == 1
        assert receiver.received == []
        with engine.connect() as conn:
            error = conn.execute(sa.text("SELECT last_error FROM callback_deliveries")).scalar()
        assert "loopback" in str(error) and "KAIROS_CALLBACK_ALLOWED_NETWORKS" in str(error)
    finally:
        receiver.close()
