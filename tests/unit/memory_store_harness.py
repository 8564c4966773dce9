"""The store contracts' harness on a new ``MemoryStore``."""

from __future__ import annotations

import dataclasses
import json
from contextlib import AbstractContextManager

from common.db.apps import AppPolicy, AppStore
from common.db.audit import masked
from common.db.delivery_store import DeliveryStore
from common.db.dispatch_store import DispatchStore
from common.db.fire_store import FireStore
from common.db.outcome_store import OutcomeStore
from common.db.rescue_store import RescueStore
from common.db.workers import WorkerRecord, WorkerStore
from common.documents import JsonObject
from common.memory.rows import MemoryDelivery, MemoryExecution, MemoryJob
from common.memory.store import MemoryStore
from common.states import DeliveryStatus
from tests.contracts.store_harness import AuditRow, StoreHarness


def _document(doc: JsonObject | None) -> JsonObject | None:
    """A document as MySQL gives it back: masked, through JSON."""
    return None if doc is None else json.loads(json.dumps(masked(doc), default=str))


class MemoryStoreHarness(StoreHarness):
    """A new ``MemoryStore`` under test (rows read back as copies, as from MySQL)."""

    def setup_method(self) -> None:
        self.memory = MemoryStore()

    @property
    def store(self) -> OutcomeStore:
        return self.memory

    @property
    def dispatch_store(self) -> DispatchStore:
        return self.memory

    @property
    def fire_store(self) -> FireStore:
        return self.memory

    @property
    def rescue_store(self) -> RescueStore:
        return self.memory

    @property
    def worker_store(self) -> WorkerStore:
        return self.memory

    @property
    def delivery_store(self) -> DeliveryStore:
        return self.memory

    @property
    def app_store(self) -> AppStore:
        return self.memory

    def audit_rows(self) -> list[AuditRow]:
        return [
            AuditRow(
                at,
                e.actor,
                e.action,
                e.object_type,
                e.object_id,
                e.app_pk,
                _document(e.before),
                _document(e.after),
            )
            for at, e in self.memory.audit
        ]

    def undone_on_error(self) -> AbstractContextManager[object]:
        return self.memory.transaction()

    @property
    def app_pk(self) -> int:
        return 7

    def add_job(self, job: MemoryJob) -> int:
        return self.memory.add_job(job)

    def limit_retries(self, max_retries: int) -> None:
        app = self.memory.apps.get(self.app_pk)
        if app is None:
            self.memory.put_policy(self.app_pk, AppPolicy(max_retries=max_retries))
        else:
            app.limits = dataclasses.replace(app.limits, max_retries=max_retries)

    def job(self, job_id: int) -> MemoryJob:
        return dataclasses.replace(self.memory.jobs[job_id])

    def execution(self, execution_id: str) -> MemoryExecution:
        return dataclasses.replace(self.memory.execution(execution_id))

    def deliveries(self) -> list[MemoryDelivery]:
        return list(self.memory.deliveries)

    def set_delivery_status(self, delivery_id: str, status: DeliveryStatus) -> None:
        self.memory.deliveries = [
            dataclasses.replace(d, status=status) if d.delivery.delivery_id == delivery_id else d
            for d in self.memory.deliveries
        ]

    def worker(self, worker_id: str) -> WorkerRecord:
        return self.memory.workers[worker_id]
