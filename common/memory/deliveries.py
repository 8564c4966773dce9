"""The in-memory store as a callback's life moves its delivery: ``DeliveryStore``'s
reads and writes besides recording's (``insert_deliveries`` and
``jobs_with_callbacks_on_their_way`` are ``OutcomeTables``')."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from common.db.deliveries import (
    MAX_ERROR_CHARS,
    UNSETTLED,
    AttemptRecord,
    DeliveryRecord,
    DeliveryToSend,
    NewAttempt,
)
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
