"""The notifier's reads and records of callback deliveries for many callbacks at once:
one statement where there was one per callback, so that the store keeps pace with the
posts."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.deliveries import MAX_ERROR_CHARS, DeliveryToSend, NewAttempt, to_send_select
from common.db.schema import callback_attempts as attempts
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
    # on them (see ``record_attempt``), in one statement.
    ids = [record.delivery_id for record in records]
    locked = conn.execute(
        sa.select(deliveries.c.delivery_id, deliveries.c.id)
        .where(deliveries.c.delivery_id.in_(ids))
        .order_by(deliveries.c.id)
        .with_for_update()
    ).all()
    pks: dict[str, int] = {str(delivery_id): int(pk) for delivery_id, pk in locked}
    found = [record for record in records if record.delivery_id in pks]
    if not found:
        return
    conn.execute(
        attempts.insert(),
        [
            {
                "delivery_pk": pks[record.delivery_id],
                "attempt": record.attempt,
                "attempted_at": now_ms,
                "status_code": record.status_code,
                "error": _clipped(record.error),
                "duration_ms": record.duration_ms,
            }
            for record in found
        ],
    )
    for outcome, group in _by_outcome(found).items():
        _update_deliveries(conn, outcome, [pks[record.delivery_id] for record in group], now_ms)


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
    values: dict[str, object] = {
        "status": status,
        "attempts": deliveries.c.attempts + 1,
        "last_status_code": status_code,
        "last_error": error,
        "updated_at": now_ms,
        "next_attempt_at": next_attempt_at,
        "dead_reason": dead_reason,
    }
    if status is DeliveryStatus.DELIVERED:
        values["delivered_at"] = now_ms
    conn.execute(
        deliveries.update()
        .where(deliveries.c.id.in_(pks), deliveries.c.status != DeliveryStatus.DELIVERED)
        .values(**values)
    )


def _clipped(error: str | None) -> str | None:
    return error[:MAX_ERROR_CHARS] if error is not None else None
