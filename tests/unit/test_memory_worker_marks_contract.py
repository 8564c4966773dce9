"""``MemoryWorkerMarks`` keeps the worker marks contract (its real twin: tests/integration)."""

from __future__ import annotations

from common.memory.worker_marks import MemoryWorkerMarks
from common.worker_marks import WorkerMarks
from tests.contracts.worker_marks import WorkerMarksContract


class TestMemoryWorkerMarks(WorkerMarksContract):
    """The contract on new ``MemoryWorkerMarks``, on a clock the test moves."""

    def setup_method(self) -> None:
        self.now = 100.0
        self.memory = MemoryWorkerMarks(clock=lambda: self.now)

    @property
    def marks(self) -> WorkerMarks:
        return self.memory

    def pass_time(self, seconds: float) -> None:
        self.now += seconds
