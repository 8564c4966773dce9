"""Activity per minute, published to Redis by every dispatcher for the console's overview:
execution outcomes recorded (by status) and the trigger lag of first attempts.

Each dispatcher reads its own Prometheus counters (``common.metrics``) every couple of
seconds and adds what grew since its last read to the hash of the current minute on
the cluster clock; the hashes expire after two hours. The dispatch and results paths
never wait for this: a Redis outage costs the overview its figures, not a job.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import redis

from common.clock import ClusterClock
from common.keys import RedisKeys
from common.metrics import EXECUTIONS_FINISHED, TRIGGER_LAG
from common.states import ExecutionStatus

log = logging.getLogger(__name__)

MINUTE_MS = 60_000
KEEP_SECONDS = 2 * 3600
PUBLISH_EVERY_SECONDS = 2.0
FINISHED = "finished:"
"""Field prefix: runs whose outcome was recorded, by status (``finished:FAILED``)."""
LAG = "lag_le:"
"""Field prefix: first attempts dispatched with a trigger lag up to a bound in seconds,
cumulative as in a Prometheus histogram (``lag_le:0.25``, ``lag_le:+Inf``)."""
FAILED_OUTCOMES = (ExecutionStatus.FAILED, ExecutionStatus.LOST, ExecutionStatus.TIMED_OUT)


def read_counters() -> dict[str, float]:
    """This process's cumulative outcome counts and trigger-lag buckets."""
    values: dict[str, float] = {}
    for family in EXECUTIONS_FINISHED.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                values[FINISHED + sample.labels["status"]] = sample.value
    for family in TRIGGER_LAG.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                values[LAG + sample.labels["le"]] = sample.value
    return values


class ActivityPublisher:
    """Adds the growth of this process's counters to the current minute's hash."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        clock: ClusterClock,
        read: Callable[[], Mapping[str, float]] = read_counters,
    ) -> None:
        self._redis, self._keys, self._clock = client, keys, clock
        self._read = read
        self._last: Mapping[str, float] = {}
        self._failed_at = -1e18

    def publish(self) -> None:
        """Write what grew since the last successful write; raises on a Redis error (the
        growth is then written by the next call)."""
        current = dict(self._read())
        grown = {
            name: round(value - self._last.get(name, 0.0))
            for name, value in current.items()
            if value > self._last.get(name, 0.0)
        }
        if grown:
            key = self._keys.activity(self._clock.now_ms() // MINUTE_MS * MINUTE_MS)
            pipe = self._redis.pipeline(transaction=False)
            for name, count in grown.items():
                pipe.hincrby(key, name, count)
            pipe.expire(key, KEEP_SECONDS)
            pipe.execute()
        self._last = current

    def run(self, stop: threading.Event) -> None:
        """Publish every couple of seconds until ``stop``, and once more then."""
        while not stop.wait(PUBLISH_EVERY_SECONDS):
            self._publish_logged()
        self._publish_logged()

    def _publish_logged(self) -> None:
        try:
            self.publish()
        except Exception as e:
            # At most one line a minute while Redis is away.
            if time.monotonic() - self._failed_at > 60:
                log.warning("activity for the console not published (retrying): %s", e)
                self._failed_at = time.monotonic()


class FinishedCounts:
    """Runs recorded by outcome (``finished``: status -> count), read as succeeded and
    failed."""

    finished: Mapping[str, int]

    @property
    def succeeded(self) -> int:
        """Runs recorded SUCCEEDED."""
        return self.finished.get(ExecutionStatus.SUCCEEDED, 0)

    @property
    def failed(self) -> int:
        """Runs recorded FAILED, LOST or TIMED_OUT (a retry, if any, counts on its own)."""
        return sum(self.finished.get(status, 0) for status in FAILED_OUTCOMES)


@dataclass(frozen=True)
class MinuteActivity(FinishedCounts):
    """One minute's activity across every dispatcher of the namespace."""

    minute_ms: int
    finished: Mapping[str, int]
    lag_buckets: tuple[tuple[float, int], ...]
    """(upper bound in seconds, first attempts up to it), ascending, ``inf`` last."""


def read_activity(
    client: redis.Redis, keys: RedisKeys, now_ms: int, minutes: int
) -> list[MinuteActivity]:
    """The last ``minutes`` minutes, oldest first, the current (partial) one last."""
    current = now_ms // MINUTE_MS * MINUTE_MS
    starts = [current - MINUTE_MS * back for back in range(minutes - 1, -1, -1)]
    pipe = client.pipeline(transaction=False)
    for start in starts:
        pipe.hgetall(keys.activity(start))
    return [_minute(start, raw) for start, raw in zip(starts, pipe.execute(), strict=True)]


def _minute(start: int, raw: Mapping[bytes, bytes]) -> MinuteActivity:
    finished: dict[str, int] = {}
    lag: dict[float, int] = {}
    for name_bytes, value in raw.items():
        name = name_bytes.decode()
        if name.startswith(FINISHED):
            finished[name.removeprefix(FINISHED)] = int(value)
        elif name.startswith(LAG):
            lag[float(name.removeprefix(LAG))] = int(value)
    return MinuteActivity(start, finished, tuple(sorted(lag.items())))


def merged_buckets(minutes: Sequence[MinuteActivity]) -> tuple[tuple[float, int], ...]:
    """The lag buckets of several minutes added up."""
    total: dict[float, int] = {}
    for minute in minutes:
        for bound, count in minute.lag_buckets:
            total[bound] = total.get(bound, 0) + count
    return tuple(sorted(total.items()))


def quantile(q: float, buckets: Sequence[tuple[float, int]]) -> float | None:
    """The ``q`` quantile of cumulative buckets, interpolated inside its bucket as
    Prometheus's ``histogram_quantile`` does; ``inf`` when it lies past the last finite
    bound, None when nothing was counted."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0
    for bound, count in buckets:
        if count >= rank and count > below:
            if math.isinf(bound):
                return math.inf
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return math.inf
