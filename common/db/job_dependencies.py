"""Job dependency edges (``job_dependencies``): stored at create, checked in the same
transaction, read by the firer with the parents' runs (``common.dependencies``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from common.db import driver
from common.dependencies import (
    HELD_FOR_PARENTS,
    ChildRun,
    DependOn,
    Edge,
    ParentRun,
    find_cycle,
)
from common.errors import ValidationFailedError
from common.states import ExecutionStatus, JobStatus

MAX_PARENTS = 20
"""The most parents one job may name."""


@dataclass(frozen=True)
class After:
    """One parent a new job names: wait until its run ended as ``on``."""

    job_id: int
    on: DependOn


def check_parents(conn: Connection, app_pk: int, after: Sequence[After]) -> None:
    """Refuse (``ValidationFailedError`` naming ``after[i].jobId``) a parent that does not
    exist, is another app's, or was deleted. The parents' rows are read with a shared
    lock, so a delete cannot slip in before the caller's transaction commits the edges.
    """
    if not after:
        return
    ids = sorted({a.job_id for a in after})
    rows = driver.fetch(
        conn,
        f"SELECT id, app_pk, deleted_at FROM jobs WHERE id IN ({driver.ints(ids)}) "
        "LOCK IN SHARE MODE",
    )
    found = {int(r.id): r for r in rows}
    for index, parent in enumerate(after):
        row = found.get(parent.job_id)
        if row is None or int(row.app_pk) != app_pk:
            # Another app's job is reported as missing: its existence is not ours to tell.
            raise ValidationFailedError(
                f"after[{index}].jobId",
                f"no job {parent.job_id} of this app; name a job you created",
            )
        if row.deleted_at is not None:
            raise ValidationFailedError(
                f"after[{index}].jobId",
                f"job {parent.job_id} was deleted; a job may only wait for live jobs",
            )


def check_no_cycle(conn: Connection, app_pk: int, child: int, after: Sequence[After]) -> None:
    """Refuse edges from ``child`` to ``after`` that would close a cycle: the graph is
    walked upwards from the parents, in the caller's transaction.

    The app's row is locked first: edges join only jobs of one app, and at READ
    COMMITTED two changes walking at once would each miss the other's new edge (A after
    B and B after A both pass). Only a change of a job's parents takes this lock; a
    create cannot close a cycle (nothing waits for a job not yet made).
    """
    driver.fetch(conn, "SELECT id FROM apps WHERE id = %s FOR UPDATE", (app_pk,))
    graph: dict[int, set[int]] = {child: {a.job_id for a in after}}
    frontier = set(graph[child])
    while frontier:
        rows = driver.fetch(
            conn,
            "SELECT child_job_id, parent_job_id FROM job_dependencies "
            f"WHERE child_job_id IN ({driver.ints(sorted(frontier))}) LOCK IN SHARE MODE",
        )
        next_frontier: set[int] = set()
        for r in rows:
            kid, parent = int(r.child_job_id), int(r.parent_job_id)
            if kid == child:
                continue  # the edges being replaced
            graph.setdefault(kid, set()).add(parent)
            if parent not in graph:
                next_frontier.add(parent)
        for job in frontier:
            graph.setdefault(job, set())
        frontier = next_frontier - {child}
    cycle = find_cycle(graph, child)
    if cycle is not None:
        path = " -> ".join(str(j) for j in cycle)
        raise ValidationFailedError(
            "after", f"would close a cycle ({path}); a job may not wait for itself"
        )


def insert_edges(conn: Connection, edges: Iterable[tuple[int, After]]) -> None:
    """Store each (child job, parent) edge and flag the parents (``jobs.has_children``);
    the children were inserted flagged (``jobs.has_dependencies``)."""
    rows = [(child, a.job_id, a.on.value) for child, a in edges]
    if not rows:
        return
    driver.execute(
        conn,
        "INSERT INTO job_dependencies (child_job_id, parent_job_id, on_outcome) VALUES "
        + ", ".join(["(%s, %s, %s)"] * len(rows)),
        [v for row in rows for v in row],
    )
    # Never cleared: a parent left without children costs one UPDATE of no row per run end.
    parents = driver.ints(sorted({parent for _, parent, _ in rows}))
    driver.execute(
        conn, f"UPDATE jobs SET has_children = 1 WHERE id IN ({parents}) AND has_children = 0"
    )


def wake_children(conn: Connection, parent_job_ids: Sequence[int], now_ms: int) -> int:
    """Bring forward to ``now_ms`` the SCHEDULED runs of these jobs' children that are
    held for later (for their parents, most often), so that the firer's next load looks
    at them; returns how many moved. Those still not ready are held again."""
    if not parent_job_ids:
        return 0
    ids = driver.ints(sorted(set(parent_job_ids)))
    # Only runs the firer held for their parents: a retry's backoff, a jittered or a
    # claimed-ahead trigger also waits SCHEDULED for a later time, and keeps it.
    return driver.execute(
        conn,
        "UPDATE executions e JOIN job_dependencies d ON d.child_job_id = e.job_id "
        "SET e.scheduled_at = %s "
        f"WHERE d.parent_job_id IN ({ids}) AND e.status = %s AND e.scheduled_at > %s "
        "AND e.message LIKE %s",
        (now_ms, ExecutionStatus.SCHEDULED.value, now_ms, HELD_FOR_PARENTS + "%"),
    )


def replace_edges(conn: Connection, child: int, after: Sequence[After]) -> None:
    """Make ``after`` the parents of ``child`` (none clears its flag)."""
    driver.execute(conn, "DELETE FROM job_dependencies WHERE child_job_id = %s", (child,))
    insert_edges(conn, [(child, a) for a in after])
    flag = 1 if after else 0
    driver.execute(conn, "UPDATE jobs SET has_dependencies = %s WHERE id = %s", (flag, child))


def drop_edges_of(conn: Connection, job_ids: Sequence[int]) -> None:
    """Delete the edges where these jobs are child or parent (before the jobs go)."""
    if job_ids:
        ids = driver.ints(sorted(job_ids))
        driver.execute(
            conn,
            f"DELETE FROM job_dependencies WHERE child_job_id IN ({ids}) "
            f"OR parent_job_id IN ({ids})",
        )


def after_of(conn: Connection, job_ids: Sequence[int]) -> dict[int, list[After]]:
    """Each of these jobs' parents, by parent id."""
    if not job_ids:
        return {}
    rows = driver.fetch(
        conn,
        "SELECT child_job_id, parent_job_id, on_outcome FROM job_dependencies "
        f"WHERE child_job_id IN ({driver.ints(sorted(job_ids))}) ORDER BY parent_job_id",
    )
    found: dict[int, list[After]] = {}
    for r in rows:
        after = After(int(r.parent_job_id), DependOn(r.on_outcome))
        found.setdefault(int(r.child_job_id), []).append(after)
    return found


def parents_of_jobs(
    conn: Connection, flagged: Iterable[tuple[int, bool]]
) -> dict[int, list[After]]:
    """``after_of`` for the jobs (id, has_dependencies) that have parents: no query when
    none has."""
    return after_of(conn, [job_id for job_id, has in flagged if has])


def edges_for(conn: Connection, child_job_ids: Iterable[int]) -> list[Edge]:
    """The edges of these child jobs, each with its parent's state as it is now."""
    ids = sorted(set(child_job_ids))
    if not ids:
        return []
    rows = driver.fetch(
        conn,
        "SELECT d.child_job_id, d.parent_job_id, d.on_outcome, p.deleted_at, p.status, "
        "(p.cron_expr IS NOT NULL OR p.fixed_rate_seconds IS NOT NULL) AS recurring, "
        "p.next_trigger_time FROM job_dependencies d JOIN jobs p ON p.id = d.parent_job_id "
        f"WHERE d.child_job_id IN ({driver.ints(ids)})",
    )
    return [
        Edge(
            int(r.child_job_id),
            int(r.parent_job_id),
            DependOn(r.on_outcome),
            r.deleted_at is not None,
            bool(r.recurring),
            JobStatus(r.status),
            None if r.next_trigger_time is None else int(r.next_trigger_time),
        )
        for r in rows
    ]


def parent_runs(
    conn: Connection, children: Sequence[ChildRun], edges: Sequence[Edge]
) -> list[ParentRun]:
    """The parents' scheduled (not manual) runs that ``matching_run`` may pick, in one
    query: every run of a one-shot parent (a trigger and its retries); a recurring
    parent's runs at the recurring children's trigger times, and from the one-shot
    children's creation on."""
    kids = {c.job_id: c for c in children}
    once = sorted({e.parent_job_id for e in edges if not e.parent_recurring})
    at: set[tuple[int, int]] = set()
    since: dict[int, int] = {}
    for e in edges:
        for child in (c for c in children if c.job_id == e.child_job_id):
            if not e.parent_recurring:
                continue
            if child.recurring:
                at.add((e.parent_job_id, child.trigger_time))
            else:
                start = kids[child.job_id].job_created_at
                since[e.parent_job_id] = min(since.get(e.parent_job_id, start), start)
    terms: list[str] = []
    params: list[int] = []
    if once:
        terms.append(f"job_id IN ({driver.ints(once)})")
    for job, trigger in sorted(at):
        terms.append("(job_id = %s AND trigger_time = %s)")
        params += [job, trigger]
    for job, start in sorted(since.items()):
        terms.append("(job_id = %s AND trigger_time >= %s)")
        params += [job, start]
    if not terms:
        return []
    rows = driver.fetch(
        conn,
        "SELECT job_id, execution_id, trigger_time, attempt, status FROM executions "
        f"WHERE manual = 0 AND ({' OR '.join(terms)})",
        params,
    )
    return [
        ParentRun(
            int(r.job_id),
            str(r.execution_id),
            int(r.trigger_time),
            int(r.attempt),
            ExecutionStatus(r.status),
        )
        for r in rows
    ]


def record_waited_for(conn: Connection, waited: Mapping[int, Sequence[ParentRun]]) -> None:
    """Write on each execution (by key) the parent runs it waited for."""
    for key, runs in sorted(waited.items()):
        text = json.dumps([r.as_json() for r in runs])
        driver.execute(conn, "UPDATE executions SET waited_for = %s WHERE id = %s", (text, key))


def waited_for(text: str | None) -> list[dict[str, object]] | None:
    """The stored ``executions.waited_for`` as a list (None when the run waited for none)."""
    if not text:
        return None
    value = json.loads(text)
    return value if isinstance(value, list) else None
