"""A job's later callback never overtakes its earlier one: while an earlier run's
callback is on its way (in a retry tier, parked, held by another notifier), the later
one is parked unattempted; a delivered or dead earlier one releases it, a replayed one
holds it again. Runs are ordered by trigger time, not by when their deliveries were
recorded."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

import pytest
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.db.apps import AppCredentials
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_jobs
from common.db.schema import callback_deliveries
from common.states import DeliveryStatus, ExecutionStatus
from common.topology import declare_core
from services.dispatcher.outcomes.callbacks import callback_message
from tests.integration.notifier_helpers import app, attempts, notifier, row, wait_for_status
from tests.integration.receivers import Answer, ScriptedReceiver

__all__ = ["app", "notifier"]  # fixtures


def runs_with_callbacks(
    engine: Engine, url: str, trigger_times: Sequence[int], recorded: Sequence[int] | None = None
) -> list[NewDelivery]:
    """A job of app 1 with one finished run per trigger time, each with a delivery to
    ``url``; the deliveries in trigger order, recorded in the order of the indexes
    ``recorded`` (trigger order when not given)."""
    with engine.begin() as conn:
        (job_id,) = insert_jobs(
            conn, [NewJob(1, "cb", "demo.noop", {}, None, 1_000, url, None, None)], 0
        )
        runs = [
            NewExecution(str(uuid.uuid4()), job_id, 1, t, t, ExecutionStatus.SUCCEEDED)
            for t in trigger_times
        ]
        insert_executions(conn, runs, 0)
        made = [
            NewDelivery(
                "msg_" + uuid.uuid4().hex,
                run.execution_id,
                job_id,
                1,
                url,
                json.dumps({"data": {"jobId": job_id, "triggerTime": run.trigger_time}}),
            )
            for run in runs
        ]
        for index in recorded if recorded is not None else range(len(made)):
            MySqlDeliveryStore(conn).insert_deliveries([made[index]], 0)
    return made


def publish(connection: BlockingConnection, *sent: NewDelivery) -> None:
    declare_core(connection.channel())
    assert not BatchPublisher(connection.channel()).publish([callback_message(d) for d in sent])


def arrival_ids(receiver: ScriptedReceiver) -> list[str]:
    with receiver.lock:
        return [a.headers["webhook-id"] for a in receiver.arrivals]


def held(engine: Engine, delivery: NewDelivery) -> bool:
    with engine.connect() as conn:
        found = (
            MySqlDeliveryStore(conn)
            .deliveries_to_send([delivery.delivery_id])
            .get(delivery.delivery_id)
        )
    assert found is not None
    return found.held


def set_status(engine: Engine, delivery: NewDelivery, status: DeliveryStatus) -> None:
    with engine.begin() as conn:
        conn.execute(
            callback_deliveries.update()
            .where(callback_deliveries.c.delivery_id == delivery.delivery_id)
            .values(status=status)
        )


@pytest.mark.parametrize(
    ("status", "holds"),
    [
        (DeliveryStatus.PENDING, True),
        (DeliveryStatus.QUEUED, True),
        (DeliveryStatus.RETRYING, True),
        (DeliveryStatus.DELIVERED, False),
        (DeliveryStatus.DEAD, False),
    ],
)
def test_an_earlier_run_holds_a_later_ones_callback_only_while_on_its_way(
    engine: Engine, app: AppCredentials, status: DeliveryStatus, holds: bool
) -> None:
    earlier, later = runs_with_callbacks(engine, "http://127.0.0.1/hook", [1_000, 2_000])
    set_status(engine, earlier, status)
    assert held(engine, later) is holds
    assert not held(engine, earlier), "a later run never holds an earlier one back"


def test_runs_are_ordered_by_trigger_time_not_by_when_their_callbacks_were_recorded(
    engine: Engine, app: AppCredentials
) -> None:
    # The later run ended first (overlapping runs): its delivery was recorded first.
    earlier, later = runs_with_callbacks(engine, "http://127.0.0.1/hook", [1_000, 2_000], [1, 0])
    assert (held(engine, earlier), held(engine, later)) == (False, True)


def test_a_replayed_earlier_callback_holds_the_later_ones_again(
    engine: Engine, app: AppCredentials
) -> None:
    earlier, later = runs_with_callbacks(engine, "http://127.0.0.1/hook", [1_000, 2_000])
    set_status(engine, earlier, DeliveryStatus.DEAD)
    assert not held(engine, later)
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).mark_replayed([earlier.delivery_id], 0)
    assert held(engine, later)


def test_a_later_callback_waits_while_the_earlier_one_is_in_a_retry_tier(
    engine: Engine, connection: BlockingConnection, notifier: None, app: AppCredentials
) -> None:
    receiver = ScriptedReceiver([Answer(503)])
    try:
        earlier, later = runs_with_callbacks(engine, receiver.url, [1_000, 2_000])
        publish(connection, earlier)
        wait_for_status(engine, earlier.delivery_id, "RETRYING", 10)
        publish(connection, later)  # fresh, while the earlier one waits ~1 s in its tier
        wait_for_status(engine, later.delivery_id, "DELIVERED", 30)
    finally:
        receiver.close()
    assert arrival_ids(receiver) == [earlier.delivery_id] * 2 + [later.delivery_id]
    assert row(engine, earlier.delivery_id).status == "DELIVERED"
    # Parked, not attempted: its one attempt is the one that delivered it.
    assert [a.attempt for a in attempts(engine, later.delivery_id)] == [1]


def test_a_dead_earlier_callback_releases_the_later_one(
    engine: Engine, connection: BlockingConnection, notifier: None, app: AppCredentials
) -> None:
    # Tiers 1 s, 2 s: three attempts, then DEAD.
    receiver = ScriptedReceiver([Answer(503)] * 3)
    try:
        earlier, later = runs_with_callbacks(engine, receiver.url, [1_000, 2_000])
        publish(connection, earlier)
        wait_for_status(engine, earlier.delivery_id, "RETRYING", 10)
        publish(connection, later)
        wait_for_status(engine, later.delivery_id, "DELIVERED", 40)
    finally:
        receiver.close()
    assert arrival_ids(receiver) == [earlier.delivery_id] * 3 + [later.delivery_id]
    assert row(engine, earlier.delivery_id).status == "DEAD"


def test_callbacks_handed_over_later_run_first_arrive_in_run_order(
    engine: Engine, connection: BlockingConnection, notifier: None, app: AppCredentials
) -> None:
    receiver = ScriptedReceiver()
    try:
        made = runs_with_callbacks(engine, receiver.url, [1_000, 2_000, 3_000], [2, 1, 0])
        publish(connection, *reversed(made))
        for delivery in made:
            wait_for_status(engine, delivery.delivery_id, "DELIVERED", 30)
    finally:
        receiver.close()
    assert arrival_ids(receiver) == [d.delivery_id for d in made]
