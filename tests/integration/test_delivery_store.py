"""``MySqlDeliveryStore``'s batch reads and records of deliveries (the notifier's) agree
with the one-at-a-time ones they replace: the same rows, the same ``held``, the same
attempts and states."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.db.apps import AppCredentials
from common.db.deliveries import NewAttempt, NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.schema import callback_attempts, callback_deliveries
from common.states import DeadReason, DeliveryStatus
from tests.integration.notifier_helpers import app
from tests.integration.test_notifier_job_order import runs_with_callbacks, set_status

__all__ = ["app"]  # fixtures

URL = "http://127.0.0.1/hook"


def test_one_read_of_many_deliveries_says_what_each_read_alone_says(
    engine: Engine, app: AppCredentials
) -> None:
    first_job = runs_with_callbacks(engine, URL, [1_000, 2_000, 3_000])
    second_job = runs_with_callbacks(engine, URL, [1_000, 2_000])
    set_status(engine, second_job[0], DeliveryStatus.DELIVERED)
    ids = [d.delivery_id for d in first_job + second_job] + ["msg_gone"]
    with engine.connect() as conn:
        together = MySqlDeliveryStore(conn).deliveries_to_send(ids)
        alone = {i: MySqlDeliveryStore(conn).deliveries_to_send([i]).get(i) for i in ids}
    assert together == {i: found for i, found in alone.items() if found is not None}
    held = {i: found.held for i, found in together.items()}
    assert list(held.values()) == [False, True, True, False, False]


def states(engine: Engine, made: list[NewDelivery]) -> list[tuple[object, ...]]:
    """Each delivery's state and its attempts, without row ids or times."""
    found: list[tuple[object, ...]] = []
    with engine.connect() as conn:
        for delivery in made:
            row = conn.execute(
                sa.select(callback_deliveries).where(
                    callback_deliveries.c.delivery_id == delivery.delivery_id
                )
            ).one()
            tried = conn.execute(
                sa.select(
                    callback_attempts.c.attempt,
                    callback_attempts.c.status_code,
                    callback_attempts.c.error,
                    callback_attempts.c.duration_ms,
                )
                .where(callback_attempts.c.delivery_pk == row.id)
                .order_by(callback_attempts.c.id)
            ).all()
            found.append(
                (
                    row.status,
                    row.attempts,
                    row.last_status_code,
                    row.last_error,
                    row.next_attempt_at,
                    row.dead_reason,
                    row.delivered_at is not None,
                    [tuple(t) for t in tried],
                )
            )
    return found


def outcomes(made: list[NewDelivery]) -> list[NewAttempt]:
    """Two delivered, one retrying, one dead, a second attempt of the retrying one
    that delivers it, late duplicates of delivered ones (one with no status code, its
    error holding quotes and percent signs), and one of no delivery."""
    a, b, c, d = (m.delivery_id for m in made)
    return [
        NewAttempt(a, 1, DeliveryStatus.DELIVERED, 204, None, 5),
        NewAttempt(b, 1, DeliveryStatus.RETRYING, 503, "busy" * 2_000, 7, 9_000),
        NewAttempt(c, 1, DeliveryStatus.DELIVERED, 200, None, 3),
        NewAttempt(d, 1, DeliveryStatus.DEAD, 410, "gone", 4, None, DeadReason.GONE),
        NewAttempt(b, 2, DeliveryStatus.DELIVERED, 200, None, 6),
        NewAttempt(a, 1, DeliveryStatus.RETRYING, 500, "late", 2, 8_000),
        NewAttempt(c, 2, DeliveryStatus.RETRYING, None, "refused: 100% 'sure' %s", 1, 7_000),
        NewAttempt("msg_gone", 1, DeliveryStatus.DELIVERED, 200, None, 1),
    ]


def test_attempts_recorded_together_leave_what_recording_each_in_turn_leaves(
    engine: Engine, app: AppCredentials
) -> None:
    one_by_one = [runs_with_callbacks(engine, URL, [1_000])[0] for _ in range(4)]
    together = [runs_with_callbacks(engine, URL, [1_000])[0] for _ in range(4)]
    with engine.begin() as conn:
        for record in outcomes(one_by_one):
            MySqlDeliveryStore(conn).record_attempts([record], 50)
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).record_attempts(outcomes(together), 50)
    assert states(engine, together) == states(engine, one_by_one)
    assert [s[0] for s in states(engine, together)] == [
        DeliveryStatus.DELIVERED,
        DeliveryStatus.DELIVERED,
        DeliveryStatus.DELIVERED,
        DeliveryStatus.DEAD,
    ]
