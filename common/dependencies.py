"""Job dependencies: which parent run a child's run waits for, and what its end means.

A job created with ``after`` (a list of parent jobs of its app, each with the outcome to
wait for) is a child: each of its scheduled runs is held when due until, for every
parent, the matching parent run has ended as named. Which parent run matches:

- a one-shot parent: its latest run (its trigger's last attempt), whenever it ended;
- a recurring parent of a recurring child: the parent's run with the same trigger time
  as the child's run (so two crons on one schedule run as a pipeline, tick by tick);
- a recurring parent of a one-shot child: the parent's first run whose trigger time is
  at or after the child job's creation.

Outcomes: ``SUCCEEDED`` is met by a SUCCEEDED run; ``FINISHED`` by a run that ran and
ended, SUCCEEDED, FAILED, TIMED_OUT or LOST. A parent run that was SKIPPED or CANCELLED,
one that failed when SUCCEEDED was named, a parent deleted, or a parent that will never
have the matching run (its schedule passed the trigger time without one, or it ended)
settles the child's run SKIPPED with the reason. A FAILED attempt with a retry to come is
not the end: the retry is the trigger's latest attempt. Manual runs neither wait nor
count: "run now" is explicit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from common.states import ExecutionStatus, JobStatus


class DependOn(StrEnum):
    """The outcome of a parent's run that a child's run waits for."""

    SUCCEEDED = "SUCCEEDED"
    FINISHED = "FINISHED"


RAN_AND_ENDED = frozenset(
    {
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.TIMED_OUT,
        ExecutionStatus.LOST,
    }
)
UNFINISHED = frozenset({ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED})
ENDED_JOBS = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


@dataclass(frozen=True)
class Edge:
    """One parent of a child job, as the firer reads it with the parent's state."""

    child_job_id: int
    parent_job_id: int
    on: DependOn
    parent_deleted: bool
    parent_recurring: bool
    parent_status: JobStatus
    parent_next_trigger_time: int | None


@dataclass(frozen=True)
class ParentRun:
    """A parent's scheduled run (one attempt at one trigger)."""

    job_id: int
    execution_id: str
    trigger_time: int
    attempt: int
    status: ExecutionStatus

    def as_json(self) -> dict[str, object]:
        """The run as ``executions.waited_for`` and the API show it."""
        return {"jobId": self.job_id, "executionId": self.execution_id, "status": self.status}


@dataclass(frozen=True)
class ChildRun:
    """A child's due run: the trigger it is for, and its job's kind and creation time."""

    key: int
    job_id: int
    trigger_time: int
    recurring: bool
    job_created_at: int


@dataclass(frozen=True)
class Verdict:
    """What to do with a child's due run: ``ready`` (send it), else held (``skip`` is
    False) or SKIPPED (``skip``) with ``reason``; ``waited`` names the parent runs
    matched so far (the runs it waited for, or the one that ended it)."""

    ready: bool
    skip: bool
    reason: str
    waited: tuple[ParentRun, ...]


PARENT = "parent job"
WAITING = "waiting:"
# How a run held for its parents' runs begins its message: a parent's run end finds the
# runs to look at again by it (``common.db.job_dependencies.wake_children``).
HELD_FOR_PARENTS = f"{WAITING} {PARENT} "


def waits_for_parents(has_dependencies: bool, attempt: int, manual: bool) -> bool:
    """Whether a run is judged against its job's parents: a trigger's first attempt of a
    job with parents (a retry already waited; a manual run never waits)."""
    return has_dependencies and attempt == 1 and not manual


def matching_run(child: ChildRun, edge: Edge, runs: Iterable[ParentRun]) -> ParentRun | None:
    """The parent run ``child`` waits for under ``edge`` (module docstring), or None if
    there is none yet."""
    mine = [r for r in runs if r.job_id == edge.parent_job_id]
    if edge.parent_recurring and child.recurring:
        mine = [r for r in mine if r.trigger_time == child.trigger_time]
    elif edge.parent_recurring:
        mine = [r for r in mine if r.trigger_time >= child.job_created_at]
        first = min((r.trigger_time for r in mine), default=None)
        mine = [r for r in mine if r.trigger_time == first]
    return max(mine, key=lambda r: (r.trigger_time, r.attempt), default=None)


def judge_edge(child: ChildRun, edge: Edge, run: ParentRun | None) -> tuple[str, str | None]:
    """``("ok", None)``, ``("wait", why)`` or ``("skip", why)`` for one parent."""
    parent = f"{PARENT} {edge.parent_job_id}"
    if edge.parent_deleted:
        return "skip", f"skipped: {parent} was deleted"
    if run is None:
        if _never_runs(child, edge):
            return "skip", f"skipped: {parent} will have no run for this one to wait for"
        return "wait", f"{WAITING} {parent} has no matching run yet"
    if run.status in UNFINISHED:
        return "wait", f"{WAITING} {parent} run {run.execution_id} is {run.status}"
    if run.status is ExecutionStatus.SUCCEEDED or (
        edge.on is DependOn.FINISHED and run.status in RAN_AND_ENDED
    ):
        return "ok", None
    return "skip", f"skipped: {parent} run {run.execution_id} {run.status}"


def _never_runs(child: ChildRun, edge: Edge) -> bool:
    """Whether the parent will never have the run the child waits for."""
    if edge.parent_status in ENDED_JOBS:
        return True
    if edge.parent_recurring and child.recurring:
        # A claim writes the run and moves the schedule on together: a schedule past
        # the trigger time with no run at it never makes one.
        following = edge.parent_next_trigger_time
        return following is None or following > child.trigger_time
    return False


def runs_by_job(runs: Iterable[ParentRun]) -> dict[int, list[ParentRun]]:
    """The runs grouped by their job, as ``judge`` takes them."""
    grouped: dict[int, list[ParentRun]] = {}
    for run in runs:
        grouped.setdefault(run.job_id, []).append(run)
    return grouped


def edges_by_child(edges: Iterable[Edge]) -> dict[int, list[Edge]]:
    """The edges grouped by their child job, as ``judge`` takes one child's."""
    grouped: dict[int, list[Edge]] = {}
    for edge in edges:
        grouped.setdefault(edge.child_job_id, []).append(edge)
    return grouped


def matched_runs(
    child: ChildRun, edges: Sequence[Edge], runs: Mapping[int, Sequence[ParentRun]]
) -> tuple[ParentRun, ...]:
    """The parent run ``child`` waits for under each of its edges that has one, by parent
    job: what it waited for once it was sent (``judge`` stops at a skipping parent)."""
    found = (
        matching_run(child, edge, runs.get(edge.parent_job_id, ()))
        for edge in sorted(edges, key=lambda e: e.parent_job_id)
    )
    return tuple(run for run in found if run is not None)


def judge(
    child: ChildRun, edges: Sequence[Edge], runs: Mapping[int, Sequence[ParentRun]]
) -> Verdict:
    """The verdict on a child's due run (``runs``: the parents' runs by job, as
    ``runs_by_job`` groups them): SKIPPED if any parent settles it so, held while any
    parent has not ended as named, else ready."""
    waited: list[ParentRun] = []
    waiting: str | None = None
    for edge in sorted(edges, key=lambda e: e.parent_job_id):
        run = matching_run(child, edge, runs.get(edge.parent_job_id, ()))
        if run is not None:
            waited.append(run)
        outcome, why = judge_edge(child, edge, run)
        if outcome == "skip":
            return Verdict(False, True, str(why), tuple(waited))
        if outcome == "wait" and waiting is None:
            waiting = why
    if waiting is not None:
        return Verdict(False, False, waiting, tuple(waited))
    return Verdict(True, False, "", tuple(waited))


def find_cycle(parents_of: Mapping[int, Iterable[int]], child: int) -> list[int] | None:
    """A path from ``child`` back to itself through ``parents_of`` (job -> its parents),
    or None: what refusing a cycle at submit names."""
    stack: list[tuple[int, list[int]]] = [(p, [child, p]) for p in parents_of.get(child, ())]
    seen: set[int] = set()
    while stack:
        job, path = stack.pop()
        if job == child:
            return path
        if job in seen:
            continue
        seen.add(job)
        stack.extend((p, [*path, p]) for p in parents_of.get(job, ()))
    return None
