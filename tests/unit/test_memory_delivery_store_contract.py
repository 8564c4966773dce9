"""``MemoryStore`` keeps the delivery store contract (its real twin: tests/integration)."""

from __future__ import annotations

from tests.contracts.delivery_store import DeliveryStoreContract
from tests.unit.memory_store_harness import MemoryStoreHarness


class TestMemoryDeliveryStore(MemoryStoreHarness, DeliveryStoreContract):
    """The contract on a new ``MemoryStore``."""
