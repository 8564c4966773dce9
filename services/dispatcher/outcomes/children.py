"""Waking the runs that wait for a parent's run, once that run has ended.

The firer holds a run whose parents' runs have not ended for a tenth of its wait so far
(1-30 s, ``fire_dependencies``): without a wake-up, a child of a parent that ran for an
hour would start up to 30 s after it ended. Once a results batch that ended runs of
parent jobs (``jobs.has_children``, read with the jobs' settings, so a batch without
any costs nothing) has committed, those parents' held children are brought forward to
now, and the firer's next load (every ``scan_interval_ms``) judges them again.

It is a hint, in a transaction of its own: a failure, or a child row another
transaction holds, leaves the child to its hold time, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from common.clock import Clock
from common.db.engine import lock_waits_of
from common.db.job_dependencies import wake_children

log = logging.getLogger(__name__)

# A child row another transaction holds (the firer's, judging it now) is not waited for.
LOCK_WAIT_S = 0


def wake_children_of(engine: Engine, clock: Clock, parent_job_ids: Iterable[int]) -> int:
    """Bring forward the held runs of these parent jobs' children; how many moved (0 when
    the store refused: they keep their hold time)."""
    parents = sorted(set(parent_job_ids))
    if not parents:
        return 0
    try:
        with engine.begin() as conn, lock_waits_of(conn, LOCK_WAIT_S):
            return wake_children(conn, parents, clock.now_ms())
    except SQLAlchemyError as e:
        log.info("children of jobs %s not woken (%s); they wait for their hold time", parents, e)
        return 0
