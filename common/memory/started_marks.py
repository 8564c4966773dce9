"""Started keys and the started epoch in memory: Redis's twin for unit tests.

``MemoryStartedMarks`` keeps the contract of ``common.started_marks.StartedMarks`` as
``RedisStartedMarks`` does (``tests/contracts/started_marks.py``). A test writes the
keys as workers leave them (``take``, ``store_outcome``) and loses them as a flush
would (``lose_data``). Keys given a TTL expire on the twin's clock (monotonic seconds
by default, or one the test moves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from common.started_marks import SEPARATOR, RunMark, Taken


class MemoryStartedMarks:
    """Started keys by execution id, and the started epoch (None: not set since a loss)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.values: dict[str, str] = {}
        self.epoch_ms: int | None = None
        self._clock = clock
        self._expires: dict[str, float] = {}

    def take(self, execution_id: str, owner: str, ttl_seconds: int | None = None) -> bool:
        """Set the key to ``owner`` unless it is set (NX), as a worker admitting a run
        does, with ``ttl_seconds`` to live (None: no expiry); whether it was set."""
        if self._get(execution_id) is not None:
            return False
        self.values[execution_id] = owner
        if ttl_seconds is not None:
            self._expires[execution_id] = self._clock() + ttl_seconds
        return True

    def store_outcome(self, execution_id: str, owner: str, outcome_json: str) -> None:
        """Leave the key as a worker whose run ended leaves it: owner, then the result."""
        self.values[execution_id] = owner + SEPARATOR + outcome_json

    def lose_data(self) -> None:
        """Lose every key and the epoch, as a flush or a failover behind does."""
        self.values.clear()
        self._expires.clear()
        self.epoch_ms = None

    def read_runs(self, execution_ids: Sequence[str], *, with_ttl: bool = False) -> list[RunMark]:
        """The mark of each execution, as ``RedisStartedMarks.read_runs`` reads it."""
        return [
            RunMark.parse(self._get(e), self._left_ms(e) if with_ttl else None)
            for e in execution_ids
        ]

    def fence(self, execution_ids: Sequence[str], owner: str, ttl_seconds: int) -> list[bool]:
        """Take each free key for ``owner``, as ``RedisStartedMarks.fence`` does."""
        return [self.take(e, owner, ttl_seconds) for e in execution_ids]

    def shorten(self, execution_ids: Sequence[str], ttl_seconds: int) -> None:
        """As EXPIRE does: each key that exists lives ``ttl_seconds`` from now."""
        for e in execution_ids:
            if self._get(e) is not None:
                self._expires[e] = self._clock() + ttl_seconds

    def take_runs(
        self, execution_ids: Sequence[str], worker_id: str, ttl_seconds: int, now_ms: int
    ) -> Taken:
        """As the take script does: the epoch set when missing, each free key taken."""
        epoch = self.epoch(now_ms)
        marks = [
            None if self.take(e, worker_id, ttl_seconds) else RunMark.parse(self._get(e))
            for e in execution_ids
        ]
        return Taken(marks, epoch)

    def release_runs(self, execution_ids: Sequence[str], worker_id: str) -> int:
        """As the release script does: delete the keys ``worker_id`` still holds."""
        released = 0
        for e in execution_ids:
            if self._get(e) == worker_id:
                del self.values[e]
                self._expires.pop(e, None)
                released += 1
        return released

    def store_outcomes(self, worker_id: str, outcomes: Sequence[tuple[str, str]]) -> None:
        """As the remember script does: keys ``worker_id`` still holds get the result."""
        for e, outcome_json in outcomes:
            if self._get(e) == worker_id:
                self.store_outcome(e, worker_id, outcome_json)

    def epoch(self, now_ms: int) -> int:
        """The started epoch, set to ``now_ms`` when there is none."""
        if self.epoch_ms is None:
            self.epoch_ms = now_ms
        return self.epoch_ms

    def _get(self, execution_id: str) -> str | None:
        """The key's value, once an expired key is gone (Redis expires them lazily too)."""
        deadline = self._expires.get(execution_id)
        if deadline is not None and deadline <= self._clock():
            del self._expires[execution_id]
            self.values.pop(execution_id, None)
        return self.values.get(execution_id)

    def _left_ms(self, execution_id: str) -> int | None:
        """What PTTL answers, None for no key or no expiry."""
        deadline = self._expires.get(execution_id)
        if deadline is None or self._get(execution_id) is None:
            return None
        return int((deadline - self._clock()) * 1000)
