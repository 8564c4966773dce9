"""What becomes of each unfinished execution of a dead worker, decided from its started
key alone: the part of rescue that needs no store, so it is tested on its own.

A run the worker took (its started key names it) either stored its outcome there
(**ended**: that outcome is reported) or did not (**lost**: it died while running it).
An execution with no started key was never taken, unless Redis may have lost the key
(dispatched before the started epoch): then nobody can tell, and it is **unknown**,
recorded LOST rather than risk a second run. The rest never started on this worker and
**move** to a live one; one whose key another owner holds (the reconciler or an
operator fenced it) is dropped by the worker it reaches, which finds the key taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from common.db.executions_with_job import ExecutionWithJob
from common.started_marks import RunMark, RunState, key_may_be_lost


@dataclass(frozen=True)
class RescuePlan:
    """A dead worker's unfinished executions, sorted by what rescue does with each."""

    ended: list[tuple[ExecutionWithJob, str]] = field(default_factory=list)
    lost: list[ExecutionWithJob] = field(default_factory=list)
    unknown: list[ExecutionWithJob] = field(default_factory=list)
    unstarted: list[ExecutionWithJob] = field(default_factory=list)


def plan_rescue(
    worker_id: str,
    rows: Sequence[ExecutionWithJob],
    marks: Mapping[str, RunMark],
    epoch_ms: int,
) -> RescuePlan:
    """Sort ``rows`` (unfinished on the dead ``worker_id``) by their started ``marks``
    (by execution id) and the started epoch ``epoch_ms``."""
    plan = RescuePlan()
    for row in rows:
        mark = marks.get(row.execution_id, RunMark())
        if mark.owner == worker_id:
            if mark.state is RunState.ENDED_UNRECORDED:
                assert mark.outcome is not None  # what ENDED_UNRECORDED means
                plan.ended.append((row, mark.outcome))
            else:
                plan.lost.append(row)
        elif mark.state is RunState.NEVER_STARTED and key_may_be_lost(row.dispatched_at, epoch_ms):
            plan.unknown.append(row)
        else:
            plan.unstarted.append(row)
    return plan
