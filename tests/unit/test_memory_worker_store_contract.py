"""``MemoryStore`` keeps the worker store contract (its real twin: tests/integration)."""

from __future__ import annotations

from tests.contracts.worker_store import WorkerStoreContract
from tests.unit.memory_store_harness import MemoryStoreHarness


class TestMemoryWorkerStore(MemoryStoreHarness, WorkerStoreContract):
    """The contract on a new ``MemoryStore``."""
