"""The dependency rule of the firer: a due run of a job with parents is sent only once
each parent's matching run ended as named, held until then, or SKIPPED with the reason
(``common.dependencies``). State lives in MySQL (the edges and the parents' runs, read
in the fire transaction), so a dispatcher that restarts decides the same."""

from __future__ import annotations

from common.db.executions_with_job import ExecutionWithJob
from common.db.fire_store import FireStore
from common.dependencies import ChildRun, ParentRun, edges_by_child, judge, runs_by_job
from services.dispatcher.trigger.fire_rules import FireDecisions

# How long a run that waits for its parents is left before the firer looks again: a
# tenth of how long it has waited so far, between these bounds. Short at first, since a
# chain's parents often end within seconds; longer for a run that waits for a parent due
# hours away, as each look costs a row update.
DEPENDENCY_HOLD_MS = 1_000
DEPENDENCY_HOLD_MAX_MS = 30_000


def dependency_hold_ms(row: ExecutionWithJob, now_ms: int) -> int:
    """How long ``row``, held for its parents now, waits before it is looked at again."""
    waited = max(0, now_ms - row.trigger_time)
    return min(DEPENDENCY_HOLD_MAX_MS, max(DEPENDENCY_HOLD_MS, waited // 10))


def settle_dependencies(store: FireStore, decisions: FireDecisions, now_ms: int) -> dict[int, str]:
    """Judge the runs to send whose jobs have parents (one read of edges and one of
    parent runs for all of them; none when no run to send has parents): those not ready
    leave ``to_send`` and are held (``dependency_hold_ms``), SKIPPED ones go into
    ``decisions.skipped``; returns the held ones (key -> why). What each ready or
    skipped run waited for is written on it."""
    children = [r for r in decisions.to_send if r.waits_for_parents]
    if not children:
        return {}
    runs = [
        ChildRun(r.id, r.job_id, r.trigger_time, r.recurring, r.job_created_at) for r in children
    ]
    edges, parent_runs = store.parents_of_runs(runs)
    by_child = edges_by_child(edges)
    by_parent = runs_by_job(parent_runs)
    held: dict[int, str] = {}
    waited: dict[int, tuple[ParentRun, ...]] = {}
    for child in runs:
        verdict = judge(child, by_child.get(child.job_id, []), by_parent)
        if verdict.skip:
            decisions.skipped[child.key] = verdict.reason
        elif not verdict.ready:
            held[child.key] = verdict.reason
        if verdict.ready or verdict.skip:
            waited[child.key] = verdict.waited
    decisions.to_send = [
        r for r in decisions.to_send if r.id not in held and r.id not in decisions.skipped
    ]
    store.record_waited_for({k: v for k, v in waited.items() if v})
    _hold(store, [r for r in children if r.id in held], held, now_ms)
    return held


def _hold(
    store: FireStore, rows: list[ExecutionWithJob], held: dict[int, str], now_ms: int
) -> None:
    """Leave the held runs SCHEDULED until their next look, one write per hold time."""
    until: dict[int, dict[int, str]] = {}
    for row in rows:
        until.setdefault(now_ms + dependency_hold_ms(row, now_ms), {})[row.id] = held[row.id]
    for at, reasons in sorted(until.items()):
        store.hold_scheduled(reasons, at)
