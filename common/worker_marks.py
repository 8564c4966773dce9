"""What Redis holds of each worker, and its one owner, ``WorkerMarks``.

Besides its row in MySQL, each heartbeat is written to a Redis hash that expires after
three intervals: the worker's load, how many dispatch messages it held unacked and the
cluster time of that count (the reconciler's proof that no message of it is still on
its way), and its incarnation (a second process under the same id refuses to start
while the first one beats). An operator's orders are two keys: a request to drain and
stop, taken once by the next heartbeat (and expiring if none comes), and a standing
drain, kept until an operator lifts it.

``RedisWorkerMarks`` on Redis, ``common.memory.worker_marks.MemoryWorkerMarks`` in unit
tests (``tests/contracts/worker_marks.py`` holds both to the same behaviour).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import redis

from common.keys import WORKER_HELD, WORKER_HELD_AT, RedisKeys


@dataclass(frozen=True)
class Orders:
    """What operators ask of a worker, as one heartbeat takes it: drain and stop
    (``stop_by``, asked once and taken with this heartbeat) and stay drained
    (``drained_by``, standing); each names who asked, None when nobody did."""

    stop_by: str | None = None
    drained_by: str | None = None


@dataclass(frozen=True)
class Held:
    """How many dispatch messages a worker held unacked, counted at or after ``at_ms``
    (cluster time)."""

    count: int
    at_ms: int


class WorkerMarks(Protocol):
    """The workers' heartbeat hashes and operators' orders in Redis."""

    def beat(self, worker_id: str, fields: Mapping[str, str | int], ttl_ms: int) -> Orders:
        """Write the worker's heartbeat hash (``fields``, expiring after ``ttl_ms``), take
        its stop request and read its standing drain, in one round trip."""
        ...

    def last_beat(self, worker_id: str) -> dict[str, str]:
        """The fields of the worker's last heartbeat; empty once it expired."""
        ...

    def held(self, worker_id: str) -> Held | None:
        """What the worker's last heartbeat says it held; None when it says nothing."""
        ...

    def request_stop(self, worker_id: str, by: str, ttl_seconds: int) -> None:
        """Ask the worker to drain and stop at its next heartbeat (within ``ttl_seconds``)."""
        ...

    def forget_stop_request(self, worker_id: str) -> None:
        """Drop a stop request left for an earlier process under the worker's id."""
        ...

    def drain(self, worker_id: str, by: str) -> None:
        """Keep the worker drained until ``undrain``."""
        ...

    def undrain(self, worker_id: str) -> bool:
        """Lift the worker's standing drain; whether there was one."""
        ...

    def drained(self, worker_ids: Sequence[str]) -> set[str]:
        """Which of these workers stand drained."""
        ...

    def stops_requested(self, worker_ids: Sequence[str]) -> set[str]:
        """Which of these workers have a stop request no heartbeat has taken yet."""
        ...


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")


class RedisWorkerMarks:
    """``WorkerMarks`` on a namespace's Redis keys."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._redis = client
        self._keys = keys

    def beat(self, worker_id: str, fields: Mapping[str, str | int], ttl_ms: int) -> Orders:
        """See ``WorkerMarks.beat``."""
        key = self._keys.worker(worker_id)
        stop = self._keys.worker_drain(worker_id)
        pipe = self._redis.pipeline()
        pipe.hset(key, mapping=cast(Any, dict(fields)))
        pipe.pexpire(key, ttl_ms)
        pipe.get(stop)
        pipe.delete(stop)
        pipe.get(self._keys.worker_drained(worker_id))
        replies = pipe.execute()
        return Orders(_text(replies[2]), _text(replies[4]))

    def last_beat(self, worker_id: str) -> dict[str, str]:
        """See ``WorkerMarks.last_beat``."""
        fields: Mapping[bytes, bytes] = self._redis.hgetall(self._keys.worker(worker_id))  # type: ignore[assignment]
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in fields.items()}

    def held(self, worker_id: str) -> Held | None:
        """See ``WorkerMarks.held``."""
        count, at = self._redis.hmget(self._keys.worker(worker_id), WORKER_HELD, WORKER_HELD_AT)
        if count is None or at is None:
            return None
        return Held(int(count), int(at))

    def request_stop(self, worker_id: str, by: str, ttl_seconds: int) -> None:
        """See ``WorkerMarks.request_stop``."""
        self._redis.set(self._keys.worker_drain(worker_id), by, ex=ttl_seconds)

    def forget_stop_request(self, worker_id: str) -> None:
        """See ``WorkerMarks.forget_stop_request``."""
        self._redis.delete(self._keys.worker_drain(worker_id))

    def drain(self, worker_id: str, by: str) -> None:
        """See ``WorkerMarks.drain``."""
        self._redis.set(self._keys.worker_drained(worker_id), by)

    def undrain(self, worker_id: str) -> bool:
        """See ``WorkerMarks.undrain``."""
        return bool(self._redis.delete(self._keys.worker_drained(worker_id)))

    def drained(self, worker_ids: Sequence[str]) -> set[str]:
        """See ``WorkerMarks.drained``."""
        return self._present([self._keys.worker_drained(w) for w in worker_ids], worker_ids)

    def stops_requested(self, worker_ids: Sequence[str]) -> set[str]:
        """See ``WorkerMarks.stops_requested``."""
        return self._present([self._keys.worker_drain(w) for w in worker_ids], worker_ids)

    def _present(self, keys: list[str], worker_ids: Sequence[str]) -> set[str]:
        if not keys:
            return set()
        found = self._redis.mget(keys)
        return {w for w, value in zip(worker_ids, found, strict=True) if value is not None}
