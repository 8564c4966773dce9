"""The in-memory store as a callback's life moves its delivery: ``DeliveryStore``'s
reads and writes besides recording's (``insert_deliveries`` and
``jobs_with_callbacks_on_their_way`` are ``OutcomeTables``')."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Sequence

from common.db.deliveries import (
    MAX_ERROR_CHARS,
    UNSETTLED,
    AttemptRecord,
    DeliveryRecord,
    DeliveryToSend,
    NewAttempt,
)
from common.db.delivery_store import SETTLED
from common.memory.rows import MemoryDelivery
from common.memory.tables import MemoryTables
from common.states import DeliveryStatus


class DeliveryTables(MemoryTables):
    """``DeliveryStore`` in memory, but for what recording writes (``OutcomeTables``)."""

    def confirm_queued(self, delivery_ids: Iterable[str], now_ms: int) -> None:
        """Those of these deliveries still PENDING become QUEUED."""
        wanted = set(delivery_ids)
        self._change(
            lambda d: d.delivery.delivery_id in wanted and d.status is DeliveryStatus.PENDING,
            status=DeliveryStatus.QUEUED,
            updated_at=now_ms,
        )

    def stale_pending(
        self, updated_before_ms: int, limit: int, lock: bool = False
    ) -> list[DeliveryRecord]:
        """Up to ``limit`` PENDING deliveries unchanged since before the cut-off, by row
        id (nothing is ever held by another transaction here: ``lock`` passes none over)."""
        found = [
            d
            for d in self.deliveries
            if d.status is DeliveryStatus.PENDING and d.updated_at < updated_before_ms
        ]
        return [d.record() for d in sorted(found, key=lambda d: d.pk)[:limit]]

    def return_unattempted_to_pending(self, execution_ids: Iterable[str], now_ms: int) -> int:
        """The QUEUED deliveries of these executions with no attempt yet become PENDING."""
        wanted = set(execution_ids)
        return self._change(
            lambda d: (
                d.delivery.execution_id in wanted
                and d.status is DeliveryStatus.QUEUED
                and d.attempts == 0
            ),
            status=DeliveryStatus.PENDING,
            updated_at=now_ms,
        )

    def deliveries_to_send(self, delivery_ids: Sequence[str]) -> dict[str, DeliveryToSend]:
        """The deliveries with these ids, each ``held`` when an earlier run of its job
        (by trigger time, then by its execution's row) has a delivery still on its way;
        a delivery whose execution is gone neither waits nor holds another back."""
        wanted = set(delivery_ids)
        return {
            d.delivery.delivery_id: DeliveryToSend(d.record(), self._held(d))
            for d in self.deliveries
            if d.delivery.delivery_id in wanted
        }

    def record_attempts(self, records: Sequence[NewAttempt], now_ms: int) -> None:
        """Record the attempts in their order and each delivery's state after them; a
        DELIVERED delivery stays so (its late copy's attempt is recorded all the same),
        and an attempt of a delivery that is gone is dropped."""
        for record in records:
            index = self._index_of(record.delivery_id)
            if index is None:
                continue
            row = self.deliveries[index]
            error = record.error[:MAX_ERROR_CHARS] if record.error is not None else None
            self.callback_attempts.append(
                AttemptRecord(
                    row.pk, record.attempt, now_ms, record.status_code, error, record.duration_ms
                )
            )
            if row.status is DeliveryStatus.DELIVERED:
                continue
            delivered = record.status is DeliveryStatus.DELIVERED
            self.deliveries[index] = dataclasses.replace(
                row,
                status=record.status,
                attempts=row.attempts + 1,
                last_status_code=record.status_code,
                last_error=error,
                updated_at=now_ms,
                next_attempt_at=record.next_attempt_at,
                dead_reason=record.dead_reason,
                delivered_at=now_ms if delivered else row.delivered_at,
            )

    def get_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """One delivery by its id."""
        index = self._index_of(delivery_id)
        return None if index is None else self.deliveries[index].record()

    def mark_replayed(self, delivery_ids: Iterable[str], now_ms: int) -> None:
        """Those of these deliveries still DEAD become QUEUED, their dead reason and
        next attempt cleared."""
        wanted = set(delivery_ids)
        self._change(
            lambda d: d.delivery.delivery_id in wanted and d.status is DeliveryStatus.DEAD,
            status=DeliveryStatus.QUEUED,
            dead_reason=None,
            next_attempt_at=None,
            updated_at=now_ms,
        )

    def callbacks_of(self, delivery_ids: Iterable[str]) -> list[DeliveryRecord]:
        """The deliveries with these ids that are runs' callbacks (not alerts), by id."""
        wanted = set(delivery_ids)
        found = [
            d
            for d in self.deliveries
            if d.delivery.delivery_id in wanted and d.delivery.alert_rule_pk is None
        ]
        return [d.record() for d in sorted(found, key=lambda d: d.delivery.delivery_id)]

    def start_again(self, delivery_id: str, now_ms: int) -> bool:
        """Make a DEAD or DELIVERED delivery PENDING for a fresh schedule."""
        return bool(
            self._change(
                lambda d: d.delivery.delivery_id == delivery_id and d.status in SETTLED,
                status=DeliveryStatus.PENDING,
                next_attempt_at=None,
                dead_reason=None,
                delivered_at=None,
                updated_at=now_ms,
            )
        )

    def find_for_app(self, app_pk: int, delivery_id: str) -> DeliveryRecord | None:
        """The delivery with this id if it is one of the app's callbacks."""
        found = self.get_delivery(delivery_id)
        return found if found is not None and found.app_pk == app_pk else None

    def page_for_job(self, job_id: int, before_pk: int | None, limit: int) -> list[DeliveryRecord]:
        """Up to ``limit`` of a job's deliveries, newest first, older than ``before_pk``."""
        found = [
            d
            for d in self.deliveries
            if d.delivery.job_id == job_id and (before_pk is None or d.pk < before_pk)
        ]
        return [d.record() for d in sorted(found, key=lambda d: -d.pk)[:limit]]

    def attempts_of(self, delivery_pks: Sequence[int]) -> dict[int, list[AttemptRecord]]:
        """The attempts of these deliveries, oldest first."""
        found: dict[int, list[AttemptRecord]] = {pk: [] for pk in delivery_pks}
        for attempt in self.callback_attempts:
            if attempt.delivery_pk in found:
                found[attempt.delivery_pk].append(attempt)
        return found

    def dead_deliveries(
        self,
        limit: int,
        app_pk: int | None = None,
        app_pks: Collection[int] | None = None,
    ) -> list[DeliveryRecord]:
        """DEAD deliveries, most recently parked first (then by row, as MySQL's index
        gives equal times), of the app or apps when given."""
        found = [d for d in self._dead(app_pks) if app_pk is None or d.delivery.app_pk == app_pk]
        found.sort(key=lambda d: (-d.updated_at, d.pk))
        return [d.record() for d in found[:limit]]

    def dead_of_job(self, job_id: int) -> list[DeliveryRecord]:
        """A job's DEAD deliveries, by row id."""
        return [d.record() for d in self._dead(None) if d.delivery.job_id == job_id]

    def count_dead(self, app_pks: Collection[int] | None = None) -> int:
        """How many deliveries are DEAD (of the apps ``app_pks`` when given)."""
        return len(self._dead(app_pks))

    def prune_settled(self, before_ms: int, limit: int) -> int:
        """Delete up to ``limit`` DELIVERED or DEAD deliveries last changed before
        ``before_ms`` (DELIVERED ones first), with their attempts."""
        gone: set[int] = set()
        for status in SETTLED:
            for d in sorted(self.deliveries, key=lambda d: d.pk):
                if len(gone) < limit and d.status is status and d.updated_at < before_ms:
                    gone.add(d.pk)
        self.deliveries = [d for d in self.deliveries if d.pk not in gone]
        self.callback_attempts = [a for a in self.callback_attempts if a.delivery_pk not in gone]
        return len(gone)

    def _dead(self, app_pks: Collection[int] | None) -> list[MemoryDelivery]:
        return [
            d
            for d in self.deliveries
            if d.status is DeliveryStatus.DEAD and (app_pks is None or d.delivery.app_pk in app_pks)
        ]

    def _index_of(self, delivery_id: str) -> int | None:
        for index, row in enumerate(self.deliveries):
            if row.delivery.delivery_id == delivery_id:
                return index
        return None

    def _change(self, picks: Callable[[MemoryDelivery], bool], **values: object) -> int:
        """Change the rows ``picks`` with ``values``; how many."""
        changed = 0
        for index, row in enumerate(self.deliveries):
            if picks(row):
                self.deliveries[index] = dataclasses.replace(row, **values)  # type: ignore[arg-type]
                changed += 1
        return changed

    def _held(self, row: MemoryDelivery) -> bool:
        run = self._run_order(row.delivery.execution_id)
        if run is None or row.delivery.job_id is None:
            return False
        for other in self.deliveries:
            if other.delivery.job_id != row.delivery.job_id or other.status not in UNSETTLED:
                continue
            earlier = self._run_order(other.delivery.execution_id)
            if earlier is not None and earlier < run:
                return True
        return False

    def _run_order(self, execution_id: str | None) -> tuple[int, int] | None:
        """Where a run stands among its job's: its trigger time, then its row id."""
        if execution_id is None:
            return None
        for row in self.executions.values():
            if row.execution_id == execution_id:
                return (row.trigger_time, row.id)
        return None
