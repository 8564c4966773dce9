"""Waking the runs that wait for a parent's run the firer ended without sending it.

A parent's run the firer skips or cancels (its job cancelled or paused, a misfire, the
overlap rule, its app fenced, its own parents' outcome) has ended as surely as one a
worker reported: its children's held runs are brought forward to now, as the results
path does for the runs that ran (``outcomes.children``), so they are judged at the
firer's next load instead of after their hold time.

It is a hint, in a transaction of its own after the fire committed: a failure, or a
child row another transaction holds, leaves the child to its hold time, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.exc import SQLAlchemyError

from common.db.executions_with_job import ExecutionWithJob
from common.db.fire_store import FireTransactions
from services.dispatcher.trigger.fire_rules import FireDecisions

log = logging.getLogger(__name__)


def ended_parents(rows: Sequence[ExecutionWithJob], decisions: FireDecisions) -> list[int]:
    """The jobs with children of the rows the firer ended without sending them (skipped,
    cancelled): a fire that ends runs of jobs without children costs nothing more."""
    ended = decisions.skipped.keys() | decisions.cancelled.keys()
    return sorted({r.job_id for r in rows if r.id in ended and r.has_children})


def wake_children_of_unsent(
    transactions: FireTransactions,
    rows: Sequence[ExecutionWithJob],
    decisions: FireDecisions,
    now_ms: int,
) -> int:
    """Bring forward the held runs of the children of the jobs whose runs the fire
    skipped or cancelled; how many moved (0 when the store refused: they keep their
    hold time). Called after the fire's commit."""
    parents = ended_parents(rows, decisions)
    if not parents:
        return 0
    try:
        with transactions.transaction() as store:
            return store.wake_children(parents, now_ms)
    except SQLAlchemyError as e:
        log.info("children of jobs %s not woken (%s); they wait for their hold time", parents, e)
        return 0
