"""``MemoryStore`` keeps the app store contract (its real twin: tests/integration)."""

from __future__ import annotations

from tests.contracts.app_store import AppStoreContract
from tests.unit.memory_store_harness import MemoryStoreHarness


class TestMemoryAppStore(MemoryStoreHarness, AppStoreContract):
    """The contract on a new ``MemoryStore``."""
