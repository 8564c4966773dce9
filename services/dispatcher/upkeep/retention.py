"""Retention: finished history past its age is deleted, one small batch a sweep."""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.retention import prune_deliveries, prune_executions

log = logging.getLogger(__name__)

PRUNE_BATCH = 1_000


def prune(engine: Engine, clock: ClusterClock, retention_ms: int) -> None:
    """Delete one batch of history past the retention period, if one is set."""
    if retention_ms <= 0:
        return
    cutoff = clock.now_ms() - retention_ms
    with engine.begin() as conn:
        gone = prune_executions(conn, cutoff, PRUNE_BATCH)
        gone += prune_deliveries(conn, cutoff, PRUNE_BATCH)
    if gone:
        log.info("retention: deleted %d finished rows", gone)
