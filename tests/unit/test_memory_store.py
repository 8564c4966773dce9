"""``MemoryStore`` keeps the outcome store contract (its real twin: tests/integration)."""

from __future__ import annotations

import dataclasses

from common.db.outcome_store import OutcomeStore
from common.memory_store import MemoryDelivery, MemoryExecution, MemoryJob, MemoryStore
from tests.contracts.outcome_store import OutcomeStoreContract


class TestMemoryStore(OutcomeStoreContract):
    """The contract on a new ``MemoryStore`` (rows read back as copies, as from MySQL)."""

    def setup_method(self) -> None:
        self.memory = MemoryStore()

    @property
    def store(self) -> OutcomeStore:
        return self.memory

    @property
    def app_pk(self) -> int:
        return 7

    def add_job(self, job: MemoryJob) -> int:
        return self.memory.add_job(job)

    def job(self, job_id: int) -> MemoryJob:
        return dataclasses.replace(self.memory.jobs[job_id])

    def execution(self, execution_id: str) -> MemoryExecution:
        return dataclasses.replace(self.memory.execution(execution_id))

    def deliveries(self) -> list[MemoryDelivery]:
        return list(self.memory.deliveries)
