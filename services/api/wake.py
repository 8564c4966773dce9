"""Waking the dispatcher when work falls due sooner than its next scan would notice."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis

from common.db.jobs import NewJob
from services.api.state import ApiState

log = logging.getLogger(__name__)

WAKE_HORIZON_MS = 1_000


def wake_dispatcher(state: ApiState, due_ms: int, now_ms: int) -> None:
    """Push a wake-up when something is due within the dispatcher's claim window."""
    if due_ms > now_ms + WAKE_HORIZON_MS:
        return
    try:
        pipe = state.redis.pipeline(transaction=False)
        pipe.lpush(state.keys.wake, 1)
        pipe.ltrim(state.keys.wake, 0, 0)
        pipe.execute()
    except redis.RedisError as e:
        # Only latency suffers: the dispatcher scans on its own every few hundred ms.
        log.warning("could not wake the dispatcher: %s", e)


def announce_created(
    state: ApiState, new_jobs: Sequence[NewJob], ids: Sequence[int], now_ms: int
) -> None:
    """Log jobs just stored and wake the dispatcher once, for the soonest of them."""
    if not ids:
        return
    if len(ids) == 1:
        log.info("job created", extra={"job_id": ids[0]})
    else:
        log.info("created %d jobs, ids %d..%d", len(ids), ids[0], ids[-1])
    wake_dispatcher(state, min(job.next_trigger_time for job in new_jobs), now_ms)
