"""MySQL keeps the app store contract (its fake: tests/unit)."""

from __future__ import annotations

from tests.contracts.app_store import AppStoreContract
from tests.integration.store_harness import MySqlStoreHarness


class TestMySqlAppStore(MySqlStoreHarness, AppStoreContract):
    """The contract on the test's own database, in one transaction rolled back after."""
