"""The due scan and the claim: WAITING jobs whose trigger has come, read with their
policies, and claimed by compare-and-set on each job's version."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import index

from sqlalchemy.engine import Connection

from common.db import driver
from common.schedule import MisfirePolicy, OverlapPolicy, Schedule, TriggerPolicy
from common.states import JobStatus

_POLICY_SQL = (
    "cron_expr, timezone, fixed_rate_seconds, misfire_policy, misfire_threshold_seconds, "
    "catch_up_window_seconds, overlap_policy, jitter_seconds"
)


@lru_cache(maxsize=4096)
def _policy(
    cron_expr: str | None,
    timezone: str,
    fixed_rate_seconds: int | None,
    misfire: str,
    misfire_threshold_seconds: int,
    catch_up_window_seconds: int,
    overlap: str,
    jitter_seconds: int = 0,
) -> TriggerPolicy:
    # Most jobs share a handful of policy combinations: build each one once.
    return TriggerPolicy(
        schedule=Schedule(cron_expr, timezone, fixed_rate_seconds),
        misfire=MisfirePolicy(misfire),
        misfire_threshold_ms=misfire_threshold_seconds * 1000,
        catch_up_window_ms=catch_up_window_seconds * 1000,
        overlap=OverlapPolicy(overlap),
        jitter_seconds=int(jitter_seconds),
    )


@dataclass(frozen=True)
class DueJob:
    """A job whose trigger time has come, as read by the due scan."""

    id: int
    version: int
    handler: str
    trigger_time: int
    policy: TriggerPolicy
    created_at: int
    params: str
    timeout_seconds: int | None
    app_pk: int = 0
    priority: int = 5
    # The W3C traceparent the job was submitted with, or None.
    traceparent: str | None = None
    # Its runs wait for other jobs' (``job_dependencies``): the firer alone sends them.
    has_dependencies: bool = False
    # Some job waits for its runs (``jobs.has_children``).
    has_children: bool = False


def find_due_jobs(
    conn: Connection,
    until_ms: int,
    handlers: Iterable[str],
    limit: int,
    skip_locked: bool = False,
    since_ms: int | None = None,
    latest_first: bool = False,
) -> list[DueJob]:
    """WAITING jobs due by ``until_ms`` (and not before ``since_ms``) whose handler some
    live worker runs, soonest first (or, ``latest_first``, the latest first).

    With ``skip_locked`` the rows are locked as they are read and rows another
    transaction holds are passed over: a claim still open leaves its jobs to itself.
    """
    names = list(handlers)
    if not names:
        return []
    since = "" if since_ms is None else "AND next_trigger_time >= %s "
    rows = driver.fetch(
        conn,
        "SELECT id, version, handler, next_trigger_time, created_at, params, timeout_seconds, "
        f"app_pk, priority, traceparent, has_dependencies, has_children, {_POLICY_SQL} FROM jobs "
        f"WHERE status = %s AND next_trigger_time <= %s {since}"
        f"AND handler IN ({driver.marks(len(names))}) ORDER BY next_trigger_time"
        + (" DESC" if latest_first else "")
        + " LIMIT %s"
        + (" FOR UPDATE SKIP LOCKED" if skip_locked else ""),
        (
            JobStatus.WAITING.value,
            until_ms,
            *(() if since_ms is None else (since_ms,)),
            *names,
            limit,
        ),
    )
    # Unpacked by position (the SELECT's order): by name, the attribute lookups and the
    # policy's conversions weigh on the claim thread.
    return [
        DueJob(
            key,
            version,
            handler,
            at,
            _policy(*p),
            created,
            params,
            timeout,
            app,
            prio,
            tp,
            deps,
            kids,
        )
        for (
            key,
            version,
            handler,
            at,
            created,
            params,
            timeout,
            app,
            prio,
            tp,
            deps,
            kids,
            *p,
        ) in rows
    ]


@dataclass(frozen=True)
class ClaimUpdate:
    """What claiming one trigger does to its job."""

    next_trigger_time: int | None
    status: JobStatus


def claim_jobs(
    conn: Connection, due: Sequence[DueJob], updates: Mapping[int, ClaimUpdate], now_ms: int
) -> set[int]:
    """Claim due jobs by compare-and-set on their version; return the ids this call won.

    One UPDATE claims the whole batch, each job moved on as ``updates`` says; a job
    another dispatcher claimed first has a new version and is left out. The random
    claim token tells the winners apart inside this transaction, whose row locks keep
    them ours until commit.
    """
    chosen = [j for j in due if j.id in updates]
    if not chosen:
        return set()
    token = secrets.token_hex(16)
    groups: dict[JobStatus, list[DueJob]] = {}
    for job in chosen:
        groups.setdefault(updates[job.id].status, []).append(job)
    matched = 0
    for status, group in groups.items():
        next_sql, next_params = _next_triggers(group, updates)
        pairs = ", ".join(f"({index(j.id)}, {index(j.version)})" for j in group)
        matched += driver.execute(
            conn,
            f"UPDATE jobs SET status = %s, next_trigger_time = {next_sql}, "
            "version = version + 1, claim_token = %s, updated_at = %s "
            f"WHERE (id, version) IN ({pairs})",
            (status.value, *next_params, token, now_ms),
        )
    if matched == len(chosen):
        # Rows matched, not rows changed (the engine's connections count found rows):
        # every job still had the version read, so every one is ours.
        return {j.id for j in chosen}
    ids = [j.id for j in chosen]
    won = driver.fetch(
        conn,
        f"SELECT id FROM jobs WHERE id IN ({driver.ints(ids)}) AND claim_token = %s",
        (token,),
    )
    return {int(r.id) for r in won}


def _next_triggers(
    group: Sequence[DueJob], updates: Mapping[int, ClaimUpdate]
) -> tuple[str, list[int | None]]:
    """SQL and parameters for the jobs' next triggers: one value, or a CASE by id.

    A batch of one-shot jobs all move to None; only recurring jobs need the CASE.
    """
    values = {updates[j.id].next_trigger_time for j in group}
    if len(values) == 1:
        return "%s", [values.pop()]
    cases = " ".join(
        f"WHEN {index(j.id)} THEN {driver.int_or_null(updates[j.id].next_trigger_time)}"
        for j in group
    )
    return f"CASE id {cases} END", []
