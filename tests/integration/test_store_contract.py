"""MySQL keeps the outcome, dispatch, fire and rescue store contracts (their fake: tests/unit)."""

from __future__ import annotations

from tests.contracts.dispatch_store import DispatchStoreContract
from tests.contracts.fire_store import FireStoreContract
from tests.contracts.outcome_store import OutcomeStoreContract
from tests.contracts.rescue_store import RescueStoreContract
from tests.integration.store_harness import MySqlStoreHarness


class TestMySqlStore(
    MySqlStoreHarness,
    OutcomeStoreContract,
    DispatchStoreContract,
    FireStoreContract,
    RescueStoreContract,
):
    """The contracts on the test's own database, in one transaction rolled back after."""
