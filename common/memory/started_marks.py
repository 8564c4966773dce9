"""Started keys and the started epoch in memory: Redis's twin for unit tests of rescue.

``MemoryStartedMarks`` keeps the contract of ``common.started_mark.StartedMarks`` as
``RedisStartedMarks`` does (``tests/contracts/started_marks.py``). A test writes the
keys as workers leave them (``take``, ``store_outcome``) and loses them as a flush
would (``lose_data``). What it leaves out: the keys' TTLs, and the fences and scripts
of workers, the reconciler and operators (a test writes the value they would leave).
"""

from __future__ import annotations

from common.started_mark import SEPARATOR, parse_started


class MemoryStartedMarks:
    """Started keys by execution id, and the started epoch (None: not set since a loss)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.epoch_ms: int | None = None

    def take(self, execution_id: str, owner: str) -> bool:
        """Set the key to ``owner`` unless it is set (NX), as a worker admitting a run
        does; whether it was set."""
        if execution_id in self.values:
            return False
        self.values[execution_id] = owner
        return True

    def store_outcome(self, execution_id: str, owner: str, outcome_json: str) -> None:
        """Leave the key as a worker whose run ended leaves it: owner, then the result."""
        self.values[execution_id] = owner + SEPARATOR + outcome_json

    def lose_data(self) -> None:
        """Lose every key and the epoch, as a flush or a failover behind does."""
        self.values.clear()
        self.epoch_ms = None

    def read(self, execution_id: str) -> tuple[str | None, str | None]:
        """The execution's key, parsed as ``parse_started`` parses a GET of it."""
        return parse_started(self.values.get(execution_id))

    def epoch(self, now_ms: int) -> int:
        """The started epoch, set to ``now_ms`` when there is none."""
        if self.epoch_ms is None:
            self.epoch_ms = now_ms
        return self.epoch_ms
