"""The notifier's reads and records of callback deliveries for many callbacks at once:
one statement where there was one per callback, so that the store keeps pace with the
posts."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db import driver
from common.db.deliveries import MAX_ERROR_CHARS, DeliveryToSend, NewAttempt, to_send_select
from common.db.schema import callback_deliveries as deliveries
from common.states import DeliveryStatus

# Built once: building its aliases anew costs more than the statement itself.
_TO_SEND_MANY = to_send_select().where(
    deliveries.c.delivery_id.in_(sa.bindparam("delivery_ids", expanding=True))
)


def deliveries_to_send(conn: Connection, delivery_ids: Sequence[str]) -> dict[str, DeliveryToSend]:
    """The deliveries with these ids, by id, each with ``held`` as ``delivery_to_send``
    reads it (an earlier run of its job has a delivery still on its way); an id with
    no row is absent."""
    if not delivery_ids:
        return {}
    rows = conn.execute(_TO_SEND_MANY, {"delivery_ids": sorted(set(delivery_ids))})
    found = (DeliveryToSend.from_row(row) for row in rows)
    return {to_send.record.delivery_id: to_send for to_send in found}


def record_attempts(conn: Connection, records: Sequence[NewAttempt], now_ms: int) -> None:
    """Record the attempts and each delivery's state after them, as ``record_attempt``
    does for each in turn, in a few statements: the rows locked in one SELECT, one
    INSERT of every attempt, one UPDATE per distinct outcome (all delivered: one).

    Two attempts of one delivery are recorded in rounds, in their order, so that its
    count goes up by two and its state is the later one's.
    """
    for round_ in _rounds(records):
        _record_round(conn, round_, now_ms)


def _rounds(records: Sequence[NewAttempt]) -> list[list[NewAttempt]]:
    """``records`` split so that no delivery appears twice in a round, order kept."""
    rounds: list[list[NewAttempt]] = []
    seen: dict[str, int] = {}
    for record in records:
        index = seen.get(record.delivery_id, 0)
        seen[record.delivery_id] = index + 1
        if index == len(rounds):
            rounds.append([])
        rounds[index].append(record)
    return rounds


def _record_round(conn: Connection, records: Sequence[NewAttempt], now_ms: int) -> None:
    # The delivery rows are locked before the attempts' foreign keys take shared locks
    # on them (see ``record_attempt``), in one statement. Written in the driver's SQL
    # (``common.db.driver``): through SQLAlchemy Core, binding and escaping these three
    # statements' values one by one was the largest share of the notifier's CPU.
    ids = [record.delivery_id for record in records]
    locked = driver.fetch(
        conn,
        f"SELECT delivery_id, id FROM callback_deliveries WHERE delivery_id IN "
        f"({driver.marks(len(ids))}) ORDER BY id FOR UPDATE",
        ids,
    )
    pks: dict[str, int] = {str(row.delivery_id): int(row.id) for row in locked}
    found = [record for record in records if record.delivery_id in pks]
    if not found:
        return
    _insert_attempts(conn, found, pks, now_ms)
    for outcome, group in _by_outcome(found).items():
        _update_deliveries(conn, outcome, [pks[record.delivery_id] for record in group], now_ms)


def _insert_attempts(
    conn: Connection, records: Sequence[NewAttempt], pks: dict[str, int], now_ms: int
) -> None:
    """One INSERT of every attempt; integers go into the SQL text (``driver.ints``), an
    error (most attempts have none) is the one parameter."""
    values: list[str] = []
    params: list[str] = []
    for record in records:
        error = _clipped(record.error)
        if error is not None:
            params.append(error)
        values.append(
            f"({driver.ints((pks[record.delivery_id], record.attempt, now_ms))}, "
            f"{driver.int_or_null(record.status_code)}, {'NULL' if error is None else '%s'}, "
            f"{driver.ints((record.duration_ms,))})"
        )
    driver.execute(
        conn,
        "INSERT INTO callback_attempts (delivery_pk, attempt, attempted_at, status_code, "
        f"error, duration_ms) VALUES {', '.join(values)}",
        params,
    )


_Outcome = tuple[DeliveryStatus, int | None, str | None, int | None, str | None]


def _by_outcome(records: Sequence[NewAttempt]) -> dict[_Outcome, list[NewAttempt]]:
    """The records grouped by the delivery state they leave (one UPDATE per group)."""
    groups: dict[_Outcome, list[NewAttempt]] = {}
    for record in records:
        outcome = (
            record.status,
            record.status_code,
            _clipped(record.error),
            record.next_attempt_at,
            record.dead_reason,
        )
        groups.setdefault(outcome, []).append(record)
    return groups


def _update_deliveries(conn: Connection, outcome: _Outcome, pks: list[int], now_ms: int) -> None:
    """One attempt more on each delivery, and the state it left; one DELIVERED stays so."""
    status, status_code, error, next_attempt_at, dead_reason = outcome
    delivered = status is DeliveryStatus.DELIVERED
    delivered_at = f", delivered_at = {driver.int_or_null(now_ms)}" if delivered else ""
    driver.execute(
        conn,
        "UPDATE callback_deliveries SET status = %s, attempts = attempts + 1, "
        f"last_status_code = {driver.int_or_null(status_code)}, last_error = %s, "
        f"updated_at = {driver.int_or_null(now_ms)}, "
        f"next_attempt_at = {driver.int_or_null(next_attempt_at)}, dead_reason = %s"
        f"{delivered_at} WHERE id IN ({driver.ints(pks)}) AND status <> %s",
        (status.value, error, dead_reason, DeliveryStatus.DELIVERED.value),
    )


def _clipped(error: str | None) -> str | None:
    return error[:MAX_ERROR_CHARS] if error is not None else None
