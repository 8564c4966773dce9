"""Asking a worker to drain: it finishes the runs it has, takes no more, and stops, as
on SIGTERM. The request is a Redis key the worker takes with its next heartbeat, so it
reaches a worker on any host; it lapses if no worker takes it."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.errors import WorkerNotLiveError
from common.keys import RedisKeys
from common.states import WorkerState
from common.worker_views import WorkerView, worker_views

DRAIN_REQUEST_SECONDS = 600


def request_drain(
    engine: Engine,
    client: redis.Redis,
    keys: RedisKeys,
    clock: ClusterClock,
    worker_id: str,
    stale_ms: int,
    requested_by: str,
) -> WorkerView:
    """Ask a live worker to drain; ``WorkerNotLiveError`` for one that is not running
    (unknown, stopped, forgotten, draining already or silent for longer than
    ``stale_ms``). Returns the worker as it was."""
    with engine.connect() as conn:
        found = {w.worker_id: w for w in worker_views(conn, clock.now_ms(), stale_ms)}
    worker = found.get(worker_id)
    if worker is None:
        raise WorkerNotLiveError(worker_id, "no worker has that id")
    if worker.state is not WorkerState.ACTIVE:
        raise WorkerNotLiveError(worker_id, f"it is {worker.state.value}")
    if worker.stale:
        raise WorkerNotLiveError(
            worker_id, f"it has not sent a heartbeat for {worker.age_ms / 1000:.0f} s"
        )
    client.set(keys.worker_drain(worker_id), requested_by, ex=DRAIN_REQUEST_SECONDS)
    return worker


def drains_requested(client: redis.Redis, keys: RedisKeys, worker_ids: Sequence[str]) -> set[str]:
    """Which of these workers have a drain request no heartbeat has taken yet."""
    if not worker_ids:
        return set()
    found = client.mget([keys.worker_drain(w) for w in worker_ids])
    return {w for w, value in zip(worker_ids, found, strict=True) if value is not None}
