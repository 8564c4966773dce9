"""Timeouts no worker reported: runs past their job's timeout plus a grace, counted from
their start, recorded TIMED_OUT on their worker's behalf (retried if the job allows).

A run's start is read from its started key: the worker sets it, with the cluster's
idempotency TTL, when the run starts, so its age is that TTL minus the time it has
left. An execution no worker has started yet (it waits in a deep queue) is not timed
out on its dispatch's clock: only once it has waited ``UNSTARTED_FACTOR`` times its
timeout, and a worker that gets it later reads its row first and does not run it
(``services/worker/start_guard.py``). One whose key holds an outcome, or a fence, is
being settled already and is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from common.broker import BatchPublisher
from common.db import sendable
from common.db.sendable import ExecutionWithJob
from common.result_messages import publish_results, stand_in_results
from common.started_mark import FENCES, parse_started
from common.stores import Stores

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500
STAND_IN_SENDER = "dispatcher"
# An execution no worker has started counts as timed out only after this many times
# its timeout since its dispatch: a worker's backlog, not a hung run, holds it.
UNSTARTED_FACTOR = 10


@dataclass(frozen=True)
class TimeoutSettings:
    """The grace past a job's timeout, and the TTL workers give started keys (ms)."""

    grace_ms: int
    started_ttl_ms: int


@dataclass(frozen=True)
class StartedMark:
    """What an execution's started key says: who took it, whether it stored an end,
    and how long the key has left to live (ms; None when it has no expiry)."""

    owner: str | None
    ended: bool
    left_ms: int | None


def started_marks(stores: Stores, rows: Sequence[ExecutionWithJob]) -> list[StartedMark]:
    """The started key of each row, read in one pipeline."""
    pipe = stores.redis.pipeline()
    for row in rows:
        key = stores.keys.execution_started(row.execution_id)
        pipe.get(key)
        pipe.pttl(key)
    replies = pipe.execute()
    marks = []
    for value, left in zip(replies[::2], replies[1::2], strict=True):
        owner, outcome = parse_started(value)
        marks.append(StartedMark(owner, outcome is not None, left if left >= 0 else None))
    return marks


def past_timeout(
    row: ExecutionWithJob, mark: StartedMark, now_ms: int, settings: TimeoutSettings
) -> bool:
    """Whether the run of ``row`` is past its timeout plus grace, counted from its start."""
    assert row.timeout_seconds is not None
    timeout_ms = row.timeout_seconds * 1000
    dispatched = row.dispatched_at if row.dispatched_at is not None else now_ms
    if mark.owner is None:
        return dispatched + timeout_ms * UNSTARTED_FACTOR + settings.grace_ms < now_ms
    if mark.ended or mark.owner in FENCES:
        return False
    started = dispatched
    if mark.left_ms is not None:
        # A worker with a longer TTL than this dispatcher's makes the start look later:
        # the timeout comes late, never early.
        started = max(dispatched, now_ms - (settings.started_ttl_ms - mark.left_ms))
    return started + timeout_ms + settings.grace_ms < now_ms


def time_out_overdue(stores: Stores, publisher: BatchPublisher, settings: TimeoutSettings) -> None:
    """Record TIMED_OUT for runs past their job's timeout whose worker never reported."""
    now = stores.clock.now_ms()
    with stores.engine.connect() as conn:
        candidates = sendable.overdue(conn, now, settings.grace_ms, SWEEP_LIMIT)
    if not candidates:
        return
    marks = started_marks(stores, candidates)
    rows = [r for r, m in zip(candidates, marks, strict=True) if past_timeout(r, m, now, settings)]
    if rows:
        log.warning("%d executions passed their timeout without a report", len(rows))
        why = "no result within the job's timeout"
        publish_results(publisher, STAND_IN_SENDER, stand_in_results(rows, "TIMED_OUT", why, now))
