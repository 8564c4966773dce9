"""What a worker's previous process left: settled by the next one to start with its id.

A run acked early (``KAIROS_ACK_DEADLINE_SECONDS``) has no delivery left to come back.
If its worker is restarted with the same id inside the leader's staleness window, the
leader never sees that worker dead, and the reconciler leaves a run a worker took
alone: the execution would stay QUEUED for good. So a worker process, before it
consumes, looks at the executions QUEUED on its id whose started key says this worker
took them: nothing of this process has started yet, so each was its previous
incarnation's. One that stored how it ended is reported with that result; the rest
are reported LOST (retried if the job allows), as the dead-worker rescue would.

Each process has its own incarnation id, sent with every heartbeat (Redis), so an
operator can tell one process of a worker id from the next.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from common.broker import BatchPublisher
from common.db import executions_with_job
from common.result_messages import publish_results, stand_in_results, stored_result
from common.states import ExecutionStatus
from common.stores import Stores

log = logging.getLogger(__name__)

# Most rows read: a worker's backlog may be long, and only the ones it took matter.
SETTLE_LIMIT = 10_000


def new_incarnation() -> str:
    """A fresh id for this worker process."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Settled:
    """What a starting worker found its previous incarnation left."""

    ended: int
    lost: int


def settle_previous(
    stores: Stores, publisher: BatchPublisher, worker_id: str, incarnation: str
) -> Settled:
    """Report the executions a previous process of ``worker_id`` took and never
    reported. Call before consuming, and only while no other process consumes this
    worker's queue (``wait_for_no_consumer``)."""
    with stores.engine.connect() as conn:
        rows = executions_with_job.unfinished_on_worker(conn, worker_id, SETTLE_LIMIT)
    if not rows:
        return Settled(0, 0)
    marks = stores.started_marks().read_runs([row.execution_id for row in rows])
    now = stores.clock.now_ms()
    ended = [
        stored_result(mark.outcome, row, now)
        for row, mark in zip(rows, marks, strict=True)
        if mark.owner == worker_id and mark.outcome is not None
    ]
    taken = [
        row
        for row, mark in zip(rows, marks, strict=True)
        if mark.owner == worker_id and mark.outcome is None
    ]
    why = f"interrupted: worker {worker_id} was restarted while running it"
    publish_results(
        publisher, worker_id, [*ended, *stand_in_results(taken, ExecutionStatus.LOST, why, now)]
    )
    if ended or taken:
        log.warning(
            "worker %s (incarnation %s) settled what its previous process left: %d ended "
            "unreported, %d lost",
            worker_id,
            incarnation,
            len(ended),
            len(taken),
            extra={"worker_id": worker_id},
        )
    return Settled(len(ended), len(taken))


def wait_for_no_consumer(consumers: Callable[[], int], seconds: float, poll: float = 1.0) -> bool:
    """Wait until the worker's queue has no consumer (the previous process's connection
    closed, as the broker sees it); False if one is still there after ``seconds``:
    another live process uses this worker id, and its runs are not this one's to settle."""
    deadline = time.monotonic() + seconds
    while consumers() > 0:
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True
