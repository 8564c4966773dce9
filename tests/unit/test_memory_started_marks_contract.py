"""``MemoryStartedMarks`` keeps the started marks contract (its real twin:
tests/integration)."""

from __future__ import annotations

from common.memory.started_marks import MemoryStartedMarks
from common.started_marks import StartedMarks
from tests.contracts.started_marks import StartedMarksContract


class TestMemoryStartedMarks(StartedMarksContract):
    """The contract on new ``MemoryStartedMarks``."""

    def setup_method(self) -> None:
        self.memory = MemoryStartedMarks()

    @property
    def marks(self) -> StartedMarks:
        return self.memory

    def take(self, execution_id: str, owner: str, ttl_seconds: int | None = None) -> None:
        self.memory.take(execution_id, owner, ttl_seconds)

    def store_outcome(self, execution_id: str, owner: str, outcome_json: str) -> None:
        self.memory.store_outcome(execution_id, owner, outcome_json)

    def lose_data(self) -> None:
        self.memory.lose_data()
