"""MySQL keeps the delivery store contract (its fake: tests/unit)."""

from __future__ import annotations

from tests.contracts.delivery_store import DeliveryStoreContract
from tests.integration.store_harness import MySqlStoreHarness


class TestMySqlDeliveryStore(MySqlStoreHarness, DeliveryStoreContract):
    """The contract on the test's own database, in one transaction rolled back after."""
