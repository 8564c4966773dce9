"""Workers' heartbeat hashes and operators' orders in memory: Redis's twin for unit tests.

``MemoryWorkerMarks`` keeps the contract of ``common.worker_marks.WorkerMarks`` as
``RedisWorkerMarks`` does (``tests/contracts/worker_marks.py``). Hashes and stop requests
expire on the twin's clock (monotonic seconds by default, or one the test moves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from common.keys import WORKER_HELD, WORKER_HELD_AT
from common.worker_marks import Held, Orders


class MemoryWorkerMarks:
    """Heartbeat hashes, stop requests and standing drains by worker id."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._beats: dict[str, tuple[dict[str, str], float]] = {}
        self._stops: dict[str, tuple[str, float]] = {}
        self._drained: dict[str, str] = {}

    def beat(self, worker_id: str, fields: Mapping[str, str | int], ttl_ms: int) -> Orders:
        """See ``WorkerMarks.beat``."""
        kept = self.last_beat(worker_id)
        kept.update({name: str(value) for name, value in fields.items()})
        self._beats[worker_id] = (kept, self._clock() + ttl_ms / 1000)
        stop_by = self._stop_by(worker_id)
        self._stops.pop(worker_id, None)
        return Orders(stop_by, self._drained.get(worker_id))

    def last_beat(self, worker_id: str) -> dict[str, str]:
        """See ``WorkerMarks.last_beat``."""
        found = self._beats.get(worker_id)
        if found is None or found[1] <= self._clock():
            return {}
        return dict(found[0])

    def held(self, worker_id: str) -> Held | None:
        """See ``WorkerMarks.held``."""
        fields = self.last_beat(worker_id)
        if WORKER_HELD not in fields or WORKER_HELD_AT not in fields:
            return None
        return Held(int(fields[WORKER_HELD]), int(fields[WORKER_HELD_AT]))

    def request_stop(self, worker_id: str, by: str, ttl_seconds: int) -> None:
        """See ``WorkerMarks.request_stop``."""
        self._stops[worker_id] = (by, self._clock() + ttl_seconds)

    def forget_stop_request(self, worker_id: str) -> None:
        """See ``WorkerMarks.forget_stop_request``."""
        self._stops.pop(worker_id, None)

    def drain(self, worker_id: str, by: str) -> None:
        """See ``WorkerMarks.drain``."""
        self._drained[worker_id] = by

    def undrain(self, worker_id: str) -> bool:
        """See ``WorkerMarks.undrain``."""
        return self._drained.pop(worker_id, None) is not None

    def drained(self, worker_ids: Sequence[str]) -> set[str]:
        """See ``WorkerMarks.drained``."""
        return {w for w in worker_ids if w in self._drained}

    def stops_requested(self, worker_ids: Sequence[str]) -> set[str]:
        """See ``WorkerMarks.stops_requested``."""
        return {w for w in worker_ids if self._stop_by(w) is not None}

    def _stop_by(self, worker_id: str) -> str | None:
        found = self._stops.get(worker_id)
        if found is None or found[1] <= self._clock():
            return None
        return found[0]
