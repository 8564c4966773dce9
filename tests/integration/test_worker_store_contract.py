"""MySQL keeps the worker store contract (its fake: tests/unit)."""

from __future__ import annotations

from tests.contracts.worker_store import WorkerStoreContract
from tests.integration.store_harness import MySqlStoreHarness


class TestMySqlWorkerStore(MySqlStoreHarness, WorkerStoreContract):
    """The contract on the test's own database, in one transaction rolled back after."""
