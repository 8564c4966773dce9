"""The deliveries aggregate's way through a callback's life: recorded, confirmed in the
queue, read before an attempt, its attempts recorded, swept when left PENDING, handed
back when its run is taken back, replayed from the dead letters.

``DeliveryStore`` is the port; ``MySqlDeliveryStore`` holds its SQL on a connection
whose transaction its caller holds, and ``MySqlDeliveryTransactions`` hands one out per
connection of an engine. The in-memory twin is ``common.memory.deliveries``
(``MemoryStore``); ``tests/contracts/delivery_store.py`` holds both to one contract.
Who uses it: the results path and the claim (record), the leader's sweep (PENDING ones,
runs taken back), the notifier (reads and records) and the operators' dead letters.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Protocol, TypeAlias

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from common.db import driver
from common.db.deliveries import (
    MAX_ERROR_CHARS,
    UNSETTLED,
    AttemptRecord,
    DeliveryRecord,
    DeliveryToSend,
    NewAttempt,
    NewDelivery,
)
from common.db.schema import callback_attempts as attempts
from common.db.schema import callback_deliveries as deliveries
from common.db.schema import executions
from common.db.store_transactions import EngineStores, StoreTransactions
from common.states import DeliveryStatus


class DeliveryStore(Protocol):
    """The callback deliveries as their life moves them, on one connection (or the
    in-memory twin)."""

    def insert_deliveries(
        self,
        rows: Sequence[NewDelivery],
        now_ms: int,
        status: DeliveryStatus = DeliveryStatus.PENDING,
    ) -> None:
        """Record deliveries ``status`` (PENDING, or QUEUED when their publisher sends
        them after its commit); a unique key refusing one refuses them all."""
        ...

    def jobs_with_callbacks_on_their_way(self, job_ids: Iterable[int]) -> set[int]:
        """Those of these jobs with a delivery PENDING, QUEUED or RETRYING."""
        ...

    def confirm_queued(self, delivery_ids: Iterable[str], now_ms: int) -> None:
        """Those of these deliveries still PENDING are confirmed in the callbacks queue."""
        ...

    def stale_pending(
        self, updated_before_ms: int, limit: int, lock: bool = False
    ) -> list[DeliveryRecord]:
        """Up to ``limit`` PENDING deliveries unchanged since before the cut-off, by row
        id; with ``lock``, locked for the caller, passing over those held elsewhere."""
        ...

    def return_unattempted_to_pending(self, execution_ids: Iterable[str], now_ms: int) -> int:
        """The QUEUED deliveries of these executions with no attempt yet become PENDING
        as of ``now_ms`` (the sweep publishes them again); how many."""
        ...

    def deliveries_to_send(self, delivery_ids: Sequence[str]) -> dict[str, DeliveryToSend]:
        """The deliveries with these ids, by id, each ``held`` when an earlier run of
        its job has a delivery still on its way; an id with no row is absent."""
        ...

    def record_attempts(self, records: Sequence[NewAttempt], now_ms: int) -> None:
        """Record the attempts, in their order, and each delivery's state after them;
        a DELIVERED delivery stays so, and an attempt of a delivery gone is dropped."""
        ...

    def get_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """One delivery by its id."""
        ...

    def mark_replayed(self, delivery_ids: Iterable[str], now_ms: int) -> None:
        """Those of these deliveries still DEAD, their message sent back to the callbacks
        queue, are QUEUED again, their dead reason and next attempt cleared."""
        ...

    def callbacks_of(self, delivery_ids: Iterable[str]) -> list[DeliveryRecord]:
        """The deliveries with these ids that are runs' callbacks (not alerts), by id."""
        ...

    def start_again(self, delivery_id: str, now_ms: int) -> bool:
        """Make a DEAD or DELIVERED delivery PENDING for a fresh schedule (a replay);
        False when it is neither (it is on its way already)."""
        ...

    def find_for_app(self, app_pk: int, delivery_id: str) -> DeliveryRecord | None:
        """The delivery with this id if it is one of the app's callbacks."""
        ...

    def page_for_job(self, job_id: int, before_pk: int | None, limit: int) -> list[DeliveryRecord]:
        """Up to ``limit`` of a job's deliveries, newest first, older than ``before_pk``."""
        ...

    def attempts_of(self, delivery_pks: Sequence[int]) -> dict[int, list[AttemptRecord]]:
        """The attempts of these deliveries (by delivery row id), oldest first."""
        ...

    def dead_deliveries(
        self,
        limit: int,
        app_pk: int | None = None,
        app_pks: Collection[int] | None = None,
    ) -> list[DeliveryRecord]:
        """Deliveries parked after their last retry tier, most recently parked first;
        only the app's with ``app_pk``, and only those of the apps ``app_pks`` when given."""
        ...

    def dead_of_job(self, job_id: int) -> list[DeliveryRecord]:
        """A job's DEAD deliveries, by row id."""
        ...

    def count_dead(self, app_pks: Collection[int] | None = None) -> int:
        """How many deliveries are parked dead (of the apps ``app_pks`` when given)."""
        ...

    def prune_settled(self, before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` DELIVERED or DEAD deliveries last changed before
        ``before_ms``, with their attempts; how many."""
        ...


DeliveryTransactions: TypeAlias = StoreTransactions[DeliveryStore]


def _to_send_select() -> sa.Select[*tuple[object, ...]]:
    """Deliveries with ``held``: whether an earlier run of each one's job has a
    delivery still on its way; the caller adds which deliveries (its WHERE)."""
    run = executions.alias("run")
    earlier = deliveries.alias("earlier")
    earlier_run = executions.alias("earlier_run")
    held = (
        sa.select(earlier.c.id)
        .join(earlier_run, earlier_run.c.execution_id == earlier.c.execution_id)
        .where(
            earlier.c.job_id == deliveries.c.job_id,
            earlier.c.status.in_(UNSETTLED),
            sa.or_(
                earlier_run.c.trigger_time < run.c.trigger_time,
                sa.and_(
                    earlier_run.c.trigger_time == run.c.trigger_time,
                    earlier_run.c.id < run.c.id,
                ),
            ),
        )
        .exists()
    )
    return sa.select(deliveries, held.label("held")).select_from(
        deliveries.outerjoin(run, run.c.execution_id == deliveries.c.execution_id)
    )


# Built once: building its aliases anew costs more than the statement itself.
_TO_SEND_MANY = _to_send_select().where(
    deliveries.c.delivery_id.in_(sa.bindparam("delivery_ids", expanding=True))
)


# Deliveries that will not be sent again unless an operator replays them.
SETTLED = (DeliveryStatus.DELIVERED, DeliveryStatus.DEAD)


class MySqlDeliveryStore:
    """``DeliveryStore`` on one connection, whose transaction its caller holds.

    Every statement that changes several deliveries finds their rows first and changes
    them through the primary key, in row id order: the order the notifier's records
    lock them in, so that no two transactions deadlock over one delivery.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def insert_deliveries(
        self,
        rows: Sequence[NewDelivery],
        now_ms: int,
        status: DeliveryStatus = DeliveryStatus.PENDING,
    ) -> None:
        """See ``DeliveryStore.insert_deliveries``: one statement. Written in the
        driver's SQL (``common.db.driver``): the results consumer records a callback
        with each run, and SQLAlchemy Core bound its dozen values one by one. Integers
        go into the SQL text; strings are parameters."""
        if not rows:
            return
        params: list[str] = []
        values: list[str] = []
        fixed = f"%s, 0, {driver.ints((now_ms, now_ms))}"
        for r in rows:
            params += (r.delivery_id, r.url, r.payload)
            execution = "NULL" if r.execution_id is None else "%s"
            if r.execution_id is not None:
                params.append(r.execution_id)
            trace = "NULL" if r.traceparent is None else "%s"
            if r.traceparent is not None:
                params.append(r.traceparent)
            params.append(status.value)
            values.append(
                f"(%s, %s, %s, {execution}, {trace}, {driver.int_or_null(r.job_id)}, "
                f"{driver.int_or_null(r.app_pk)}, {driver.int_or_null(r.alert_rule_pk)}, {fixed})"
            )
        driver.execute(
            self._conn,
            "INSERT INTO callback_deliveries (delivery_id, url, payload, execution_id, "
            "traceparent, job_id, app_pk, alert_rule_pk, status, attempts, created_at, "
            f"updated_at) VALUES {', '.join(values)}",
            params,
        )

    def jobs_with_callbacks_on_their_way(self, job_ids: Iterable[int]) -> set[int]:
        """See ``DeliveryStore``: in one query through the index on job and status."""
        ids = sorted(set(job_ids))
        if not ids:
            return set()
        found = driver.fetch(
            self._conn,
            f"SELECT DISTINCT job_id FROM callback_deliveries WHERE job_id IN ({driver.ints(ids)}) "
            f"AND status IN ({driver.marks(len(UNSETTLED))})",
            [s.value for s in UNSETTLED],
        )
        return {int(r.job_id) for r in found}

    def confirm_queued(self, delivery_ids: Iterable[str], now_ms: int) -> None:
        """See ``DeliveryStore.confirm_queued``."""
        self._queue(delivery_ids, DeliveryStatus.PENDING, updated_at=now_ms)

    def stale_pending(
        self, updated_before_ms: int, limit: int, lock: bool = False
    ) -> list[DeliveryRecord]:
        """See ``DeliveryStore.stale_pending``."""
        query = (
            sa.select(deliveries)
            .where(
                deliveries.c.status == DeliveryStatus.PENDING,
                deliveries.c.updated_at < updated_before_ms,
            )
            .order_by(deliveries.c.id)
            .limit(limit)
        )
        if lock:
            query = query.with_for_update(skip_locked=True)
        return [DeliveryRecord.from_row(row) for row in self._conn.execute(query)]

    def return_unattempted_to_pending(self, execution_ids: Iterable[str], now_ms: int) -> int:
        """See ``DeliveryStore.return_unattempted_to_pending``."""
        ids = sorted(set(execution_ids))
        if not ids:
            return 0
        keys = self._keys(deliveries.c.execution_id.in_(ids))
        if not keys:
            return 0
        changed = self._conn.execute(
            deliveries.update()
            .where(
                deliveries.c.id.in_(keys),
                deliveries.c.status == DeliveryStatus.QUEUED,
                deliveries.c.attempts == 0,
            )
            .values(status=DeliveryStatus.PENDING, updated_at=now_ms)
            .with_hint("FORCE INDEX (PRIMARY)", dialect_name="mysql")
        )
        return int(changed.rowcount)

    def deliveries_to_send(self, delivery_ids: Sequence[str]) -> dict[str, DeliveryToSend]:
        """See ``DeliveryStore.deliveries_to_send``: one statement for them all.

        Runs are ordered by their trigger time, then by their execution's row id (a
        retry of a trigger comes after its first attempt). The earlier deliveries are
        found through ``ix_callback_deliveries_job_status``: only the job's unsettled
        ones are read, however many it delivered before. A delivery whose execution is
        gone (pruned) neither waits nor holds another back.
        """
        if not delivery_ids:
            return {}
        found = self._conn.execute(_TO_SEND_MANY, {"delivery_ids": sorted(set(delivery_ids))})
        to_send = (DeliveryToSend.from_row(row) for row in found)
        return {one.record.delivery_id: one for one in to_send}

    def record_attempts(self, records: Sequence[NewAttempt], now_ms: int) -> None:
        """See ``DeliveryStore.record_attempts``: in a few statements (the rows locked
        in one SELECT, one INSERT of every attempt, one UPDATE per distinct outcome).
        Two attempts of one delivery are recorded in rounds, in their order, so that its
        count goes up by two and its state is the later one's."""
        for round_ in _rounds(records):
            self._record_round(round_, now_ms)

    def get_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """See ``DeliveryStore.get_delivery``."""
        query = sa.select(deliveries).where(deliveries.c.delivery_id == delivery_id)
        row = self._conn.execute(query).first()
        return DeliveryRecord.from_row(row) if row is not None else None

    def mark_replayed(self, delivery_ids: Iterable[str], now_ms: int) -> None:
        """See ``DeliveryStore.mark_replayed``."""
        self._queue(
            delivery_ids,
            DeliveryStatus.DEAD,
            dead_reason=None,
            next_attempt_at=None,
            updated_at=now_ms,
        )

    def callbacks_of(self, delivery_ids: Iterable[str]) -> list[DeliveryRecord]:
        """See ``DeliveryStore.callbacks_of``."""
        ids = sorted(set(delivery_ids))
        if not ids:
            return []
        return self._records(
            sa.select(deliveries)
            .where(deliveries.c.delivery_id.in_(ids), deliveries.c.alert_rule_pk.is_(None))
            .order_by(deliveries.c.delivery_id)
        )

    def start_again(self, delivery_id: str, now_ms: int) -> bool:
        """See ``DeliveryStore.start_again``."""
        result = self._conn.execute(
            deliveries.update()
            .where(
                deliveries.c.delivery_id == delivery_id,
                deliveries.c.status.in_([DeliveryStatus.DEAD, DeliveryStatus.DELIVERED]),
            )
            .values(
                status=DeliveryStatus.PENDING,
                next_attempt_at=None,
                dead_reason=None,
                delivered_at=None,
                updated_at=now_ms,
            )
        )
        return bool(result.rowcount)

    def find_for_app(self, app_pk: int, delivery_id: str) -> DeliveryRecord | None:
        """See ``DeliveryStore.find_for_app``."""
        found = self._records(
            sa.select(deliveries).where(
                deliveries.c.delivery_id == delivery_id, deliveries.c.app_pk == app_pk
            )
        )
        return found[0] if found else None

    def page_for_job(self, job_id: int, before_pk: int | None, limit: int) -> list[DeliveryRecord]:
        """See ``DeliveryStore.page_for_job``."""
        query = sa.select(deliveries).where(deliveries.c.job_id == job_id)
        if before_pk is not None:
            query = query.where(deliveries.c.id < before_pk)
        return self._records(query.order_by(deliveries.c.id.desc()).limit(limit))

    def attempts_of(self, delivery_pks: Sequence[int]) -> dict[int, list[AttemptRecord]]:
        """See ``DeliveryStore.attempts_of``."""
        found: dict[int, list[AttemptRecord]] = {pk: [] for pk in delivery_pks}
        if not delivery_pks:
            return found
        rows = self._conn.execute(
            sa.select(attempts)
            .where(attempts.c.delivery_pk.in_(list(delivery_pks)))
            .order_by(attempts.c.delivery_pk, attempts.c.id)
        ).all()
        for row in rows:
            attempt = AttemptRecord.from_row(row)
            found[attempt.delivery_pk].append(attempt)
        return found

    def dead_deliveries(
        self,
        limit: int,
        app_pk: int | None = None,
        app_pks: Collection[int] | None = None,
    ) -> list[DeliveryRecord]:
        """See ``DeliveryStore.dead_deliveries``."""
        query = sa.select(deliveries).where(deliveries.c.status == DeliveryStatus.DEAD)
        if app_pk is not None:
            query = query.where(deliveries.c.app_pk == app_pk)
        if app_pks is not None:
            query = query.where(deliveries.c.app_pk.in_(sorted(app_pks) or [0]))
        return self._records(query.order_by(deliveries.c.updated_at.desc()).limit(limit))

    def dead_of_job(self, job_id: int) -> list[DeliveryRecord]:
        """See ``DeliveryStore.dead_of_job``."""
        return self._records(
            sa.select(deliveries)
            .where(deliveries.c.job_id == job_id, deliveries.c.status == DeliveryStatus.DEAD)
            .order_by(deliveries.c.id)
        )

    def count_dead(self, app_pks: Collection[int] | None = None) -> int:
        """See ``DeliveryStore.count_dead``."""
        query = sa.select(sa.func.count()).where(deliveries.c.status == DeliveryStatus.DEAD)
        if app_pks is not None:
            query = query.where(deliveries.c.app_pk.in_(sorted(app_pks) or [0]))
        return int(self._conn.execute(query).scalar_one())

    def prune_settled(self, before_ms: int, limit: int) -> int:
        """See ``DeliveryStore.prune_settled``: one status at a time, through the index
        that leads with it, so a batch costs about the same whatever the table's size
        (their attempts go by the foreign key's cascade)."""
        deleted = 0
        for status in SETTLED:
            keys = list(
                self._conn.execute(
                    sa.select(deliveries.c.id)
                    .where(deliveries.c.status == status, deliveries.c.updated_at < before_ms)
                    .limit(limit - deleted)
                ).scalars()
            )
            if keys:
                self._conn.execute(deliveries.delete().where(deliveries.c.id.in_(sorted(keys))))
                deleted += len(keys)
            if deleted >= limit:
                break
        return deleted

    def _records(self, query: sa.Select[tuple[object, ...]]) -> list[DeliveryRecord]:
        return [DeliveryRecord.from_row(row) for row in self._conn.execute(query)]

    def _keys(self, where: sa.ColumnElement[bool]) -> list[int]:
        """The row ids of the deliveries ``where`` picks, read without a lock, sorted."""
        return sorted(self._conn.execute(sa.select(deliveries.c.id).where(where)).scalars())

    def _queue(
        self, delivery_ids: Iterable[str], from_status: DeliveryStatus, **values: object
    ) -> None:
        """Those of these deliveries still ``from_status`` become QUEUED, with ``values``.

        Through the primary key only: an UPDATE that found them through the status
        index would lock its entries before the rows, the other way round from the
        notifier recording an attempt (row, then its status entry), and the two would
        deadlock over one delivery.
        """
        ids = list(delivery_ids)
        if not ids:
            return
        keys = self._keys(deliveries.c.delivery_id.in_(ids))
        if keys:
            self._conn.execute(
                deliveries.update()
                .where(deliveries.c.id.in_(keys), deliveries.c.status == from_status)
                .values(status=DeliveryStatus.QUEUED, **values)
                .with_hint("FORCE INDEX (PRIMARY)", dialect_name="mysql")
            )

    def _record_round(self, records: Sequence[NewAttempt], now_ms: int) -> None:
        # The delivery rows are locked first, in one statement, before the attempts'
        # foreign keys take shared locks on them: a shared lock raised to an exclusive
        # one later deadlocks with a results consumer marking the same delivery QUEUED
        # (tests/integration/test_store_conflicts.py). Written in the driver's SQL
        # (``common.db.driver``): through SQLAlchemy Core, binding and escaping these
        # statements' values one by one was the largest share of the notifier's CPU.
        ids = [record.delivery_id for record in records]
        locked = driver.fetch(
            self._conn,
            f"SELECT delivery_id, id FROM callback_deliveries WHERE delivery_id IN "
            f"({driver.marks(len(ids))}) ORDER BY id FOR UPDATE",
            ids,
        )
        pks: dict[str, int] = {str(row.delivery_id): int(row.id) for row in locked}
        found = [record for record in records if record.delivery_id in pks]
        if not found:
            return
        self._insert_attempts(found, pks, now_ms)
        for outcome, group in _by_outcome(found).items():
            self._update_deliveries(outcome, [pks[r.delivery_id] for r in group], now_ms)

    def _insert_attempts(
        self, records: Sequence[NewAttempt], pks: dict[str, int], now_ms: int
    ) -> None:
        """One INSERT of every attempt; integers go into the SQL text (``driver.ints``),
        an error (most attempts have none) is the one parameter."""
        values: list[str] = []
        params: list[str] = []
        for record in records:
            error = _clipped(record.error)
            if error is not None:
                params.append(error)
            values.append(
                f"({driver.ints((pks[record.delivery_id], record.attempt, now_ms))}, "
                f"{driver.int_or_null(record.status_code)}, "
                f"{'NULL' if error is None else '%s'}, {driver.ints((record.duration_ms,))})"
            )
        driver.execute(
            self._conn,
            "INSERT INTO callback_attempts (delivery_pk, attempt, attempted_at, status_code, "
            f"error, duration_ms) VALUES {', '.join(values)}",
            params,
        )

    def _update_deliveries(self, outcome: _Outcome, pks: list[int], now_ms: int) -> None:
        """One attempt more on each delivery, and the state it left; one DELIVERED stays so."""
        status, status_code, error, next_attempt_at, dead_reason = outcome
        delivered = status is DeliveryStatus.DELIVERED
        delivered_at = f", delivered_at = {driver.ints((now_ms,))}" if delivered else ""
        driver.execute(
            self._conn,
            "UPDATE callback_deliveries SET status = %s, attempts = attempts + 1, "
            f"last_status_code = {driver.int_or_null(status_code)}, last_error = %s, "
            f"updated_at = {driver.ints((now_ms,))}, "
            f"next_attempt_at = {driver.int_or_null(next_attempt_at)}, dead_reason = %s"
            f"{delivered_at} WHERE id IN ({driver.ints(pks)}) AND status <> %s",
            (status.value, error, dead_reason, DeliveryStatus.DELIVERED.value),
        )


class MySqlDeliveryTransactions(EngineStores[DeliveryStore]):
    """``DeliveryTransactions`` on an engine: one ``MySqlDeliveryStore`` per connection."""

    __slots__ = ()

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, MySqlDeliveryStore)


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


def _clipped(error: str | None) -> str | None:
    return error[:MAX_ERROR_CHARS] if error is not None else None
