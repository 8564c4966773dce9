"""What the store contracts need of a store under test: its ports, and its rows read back.

Rows are read back as the memory store's row types (``MemoryJob``, ``MemoryExecution``,
``MemoryDelivery``), so the real store and its twin are held to the same values.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass

from common.db.apps import AppStore
from common.db.delivery_store import DeliveryStore
from common.db.dispatch_store import DispatchStore
from common.db.executions import LockedExecution, NewExecution
from common.db.fire_store import FireStore
from common.db.outcome_store import OutcomeStore
from common.db.rescue_store import RescueStore
from common.db.workers import Heartbeat, WorkerRecord, WorkerStore
from common.documents import JsonObject
from common.memory.rows import MemoryDelivery, MemoryExecution, MemoryJob
from common.states import DeliveryStatus, ExecutionStatus, WorkerState

NOW = 5_000


@dataclass(frozen=True)
class AuditRow:
    """An audit row as the contracts compare it (secrets masked, documents as JSON)."""

    at: int
    actor: str
    action: str
    object_type: str
    object_id: str
    app_pk: int | None
    before: JsonObject | None
    after: JsonObject | None


class StoreHarness(ABC):
    """A store under test (its ports), with the rows read back as the memory store's."""

    @property
    @abstractmethod
    def store(self) -> OutcomeStore:
        """The store under test, empty but for one app (``app_pk``)."""

    @property
    @abstractmethod
    def dispatch_store(self) -> DispatchStore:
        """The same store as sending sees it."""

    @property
    @abstractmethod
    def fire_store(self) -> FireStore:
        """The same store as firing sees it."""

    @property
    @abstractmethod
    def rescue_store(self) -> RescueStore:
        """The same store as the rescue sees it."""

    @property
    @abstractmethod
    def worker_store(self) -> WorkerStore:
        """The same store as the workers aggregate (``WorkerStore``)."""

    @property
    @abstractmethod
    def delivery_store(self) -> DeliveryStore:
        """The same store as the deliveries aggregate (``DeliveryStore``)."""

    @property
    @abstractmethod
    def app_store(self) -> AppStore:
        """The same store as the apps aggregate (``AppStore``)."""

    @abstractmethod
    def audit_rows(self) -> list[AuditRow]:
        """Every audit row written, oldest first, its documents read back as JSON."""

    @abstractmethod
    def undone_on_error(self) -> AbstractContextManager[object]:
        """A transaction (nested in the test's) whose changes go if it raises."""

    @property
    @abstractmethod
    def app_pk(self) -> int:
        """The primary key of the app every job belongs to."""

    @abstractmethod
    def add_job(self, job: MemoryJob) -> int:
        """Add a job as ``job`` describes it (its app: ``app_pk``); its id."""

    @abstractmethod
    def limit_retries(self, max_retries: int) -> None:
        """Set the app's ``max_retries`` limit (``kairos app limits --max-retries``)."""

    @abstractmethod
    def job(self, job_id: int) -> MemoryJob:
        """The job's row."""

    @abstractmethod
    def execution(self, execution_id: str) -> MemoryExecution:
        """The execution's row."""

    @abstractmethod
    def deliveries(self) -> list[MemoryDelivery]:
        """Every delivery row, in insertion order."""

    @abstractmethod
    def set_delivery_status(self, delivery_id: str, status: DeliveryStatus) -> None:
        """Move a delivery to ``status``, as the notifier's records do."""

    @abstractmethod
    def worker(self, worker_id: str) -> WorkerRecord:
        """The worker's row."""

    # Builders.

    def a_job(self, **changes: object) -> int:
        job = MemoryJob(app_pk=self.app_pk, job_name="nightly")
        return self.add_job(dataclasses.replace(job, **changes))  # type: ignore[arg-type]

    def runs(self, job_id: int, *specs: tuple[str, ExecutionStatus]) -> list[int]:
        """Executions of ``job_id``, attempts 1, 2, ... of trigger 1000; their keys."""
        rows = [
            NewExecution(e, job_id, n, 1_000, 1_500, status, worker_id="w1")
            for n, (e, status) in enumerate(specs, start=1)
        ]
        self.store.insert_executions(rows, 1_500)
        return [self.execution(e).id for e, _ in specs]

    def a_worker(
        self, worker_id: str, heard_ms: int, state: WorkerState = WorkerState.ACTIVE
    ) -> None:
        """A worker of ``demo.noop`` last heard at ``heard_ms``, saying ``state``."""
        self.worker_store.upsert_heartbeat(
            Heartbeat(worker_id, "h", 1, 4, 0, 90, 5, ("demo.noop",), state, 100, heard_ms)
        )

    def locked(self, execution_id: str) -> LockedExecution:
        row = self.execution(execution_id)
        return row.locked()
