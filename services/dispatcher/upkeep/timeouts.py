"""Timeouts no worker reported: runs past their job's timeout plus a grace, recorded
TIMED_OUT on their worker's behalf (retried if the job allows)."""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.db import sendable
from common.result_messages import publish_results, stand_in_results

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500
STAND_IN_SENDER = "dispatcher"


def time_out_overdue(
    engine: Engine, publisher: BatchPublisher, clock: ClusterClock, grace_ms: int
) -> None:
    """Record TIMED_OUT for runs past their job's timeout whose worker never reported."""
    now = clock.now_ms()
    with engine.connect() as conn:
        rows = sendable.overdue(conn, now, grace_ms, SWEEP_LIMIT)
    if rows:
        log.warning("%d executions passed their timeout without a report", len(rows))
        why = "no result within the job's timeout"
        publish_results(publisher, STAND_IN_SENDER, stand_in_results(rows, "TIMED_OUT", why, now))
