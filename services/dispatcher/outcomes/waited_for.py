"""What a child's run waited for, written by the results path when the fire that sent it
never committed.

The firer writes the parent runs a child's run waited for in the transaction that sends
it, and publishes before that commits: a dispatcher that dies between the two leaves the
run in a worker's queue and its row SCHEDULED without them. The run goes ahead (it was
judged ready on parents' runs that had ended), so its result finds the row still
SCHEDULED, and the parents are matched again here. An ended parent run stays the one a
child matches, so this names the runs the fire judged by.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.db.dependency_store import DependencyStore
from common.db.executions import LockedExecution
from common.db.jobs import TriggerSettings
from common.dependencies import (
    ChildRun,
    edges_by_child,
    matched_runs,
    runs_by_job,
    waits_for_parents,
)
from common.states import ExecutionStatus


def sent_unrecorded(execution: LockedExecution, job: TriggerSettings) -> bool:
    """Whether this run, about to be recorded, is a child's trigger run whose sending
    fire never committed (its row is still SCHEDULED)."""
    return execution.status is ExecutionStatus.SCHEDULED and waits_for_parents(
        job.has_dependencies, execution.attempt, execution.manual
    )


def record_unsent_waits(
    store: DependencyStore, runs: Sequence[tuple[LockedExecution, TriggerSettings]]
) -> None:
    """Write on each of these runs (``sent_unrecorded``) the parent runs it matches now."""
    if not runs:
        return
    children = [
        ChildRun(e.id, e.job_id, e.trigger_time, job.recurring, job.created_at) for e, job in runs
    ]
    edges, parent_runs = store.parents_of_runs(children)
    by_child = edges_by_child(edges)
    by_parent = runs_by_job(parent_runs)
    waited = {c.key: matched_runs(c, by_child.get(c.job_id, []), by_parent) for c in children}
    store.record_waited_for({key: found for key, found in waited.items() if found})
