"""``MemoryStore`` keeps the outcome, dispatch, fire and rescue store contracts (its real twin:
tests/integration)."""

from __future__ import annotations

from tests.contracts.dispatch_store import DispatchStoreContract
from tests.contracts.fire_store import FireStoreContract
from tests.contracts.outcome_store import OutcomeStoreContract
from tests.contracts.rescue_store import RescueStoreContract
from tests.unit.memory_store_harness import MemoryStoreHarness


class TestMemoryStore(
    MemoryStoreHarness,
    OutcomeStoreContract,
    DispatchStoreContract,
    FireStoreContract,
    RescueStoreContract,
):
    """The contracts on a new ``MemoryStore`` (rows read back as copies, as from MySQL)."""
