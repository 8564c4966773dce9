"""Witnesses outside Kairos: what handlers did and what callback receivers got.

The books read MySQL, which Kairos writes: a run recorded SUCCEEDED that never did its
work, or a callback marked DELIVERED that never arrived, reads as fine there. A witness
is written by someone else (a handler's own ledger of completed side effects, a
receiver's log of what reached it), so the books checked against it cannot be talked
round by the code they check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa


@dataclass(frozen=True)
class Effect:
    """One side effect a handler completed: its job, trigger time and execution id."""

    job_id: int
    trigger_time: int
    execution_id: str


def read_effects(path: Path) -> list[Effect]:
    """The ledger file's lines (``job trigger execution``); an absent file holds none."""
    if not path.exists():
        return []
    effects = []
    for line in path.read_text().splitlines():
        job_id, trigger_time, execution_id = line.split()
        effects.append(Effect(int(job_id), int(trigger_time), execution_id))
    return effects


def count_arrivals(headers: Iterable[Mapping[str, str]]) -> Counter[str]:
    """How many callback requests arrived under each ``webhook-id`` (one mapping of
    headers per request, any letter case)."""
    arrivals: Counter[str] = Counter()
    for request in headers:
        found = {k.lower(): v for k, v in request.items()}
        arrivals[found.get("webhook-id", "")] += 1
    return arrivals


@dataclass(frozen=True)
class Witnesses:
    """What the books hold Kairos's tables against; None: not witnessed.

    ``effects``: every side effect the jobs' handler completed (a ledger). ``arrivals``:
    the callback requests their receiver got, by ``webhook-id``. ``extra_posts``: how
    many POSTs of one delivery may reach the receiver beyond the attempts it records
    (a POST made while the notifier's MySQL went away is never recorded; README's
    "Callbacks are never lost").
    """

    effects: Sequence[Effect] | None = None
    arrivals: Counter[str] | None = None
    extra_posts: int = 0


def check_effects(
    problems: list[str],
    job_ids: Iterable[int],
    executions: Sequence[sa.Row[object]],
    effects: Sequence[Effect],
) -> None:
    """Each SUCCEEDED execution did its side effect once, each side effect is of an
    execution the database holds, and each trigger that succeeded did it exactly once."""
    ids = set(job_ids)
    mine = [e for e in effects if e.job_id in ids]
    rows = {str(r.execution_id): r for r in executions}
    by_execution = Counter(e.execution_id for e in mine)
    for row in executions:
        n = by_execution.get(str(row.execution_id), 0)
        where = f"job {row.job_id}: execution {row.execution_id}"
        if row.status == "SUCCEEDED" and n == 0:
            problems.append(f"{where} SUCCEEDED, but no side effect of it is in the ledger")
        elif n > 1:
            problems.append(f"{where} did its side effect {n} times")
    for effect in mine:
        if effect.execution_id not in rows:
            problems.append(
                f"job {effect.job_id}: side effect of execution {effect.execution_id}, "
                "which the database does not hold"
            )
    _check_effects_per_trigger(problems, executions, mine, rows)


def _of_trigger(row: sa.Row[object]) -> bool:
    """A run of its trigger time: made by the schedule or by a backfill."""
    return not row.manual or bool(row.backfill)


def _check_effects_per_trigger(
    problems: list[str],
    executions: Sequence[sa.Row[object]],
    effects: Sequence[Effect],
    rows: Mapping[str, sa.Row[object]],
) -> None:
    # Manual runs ("trigger now") are runs of their own, beside the trigger's; a
    # backfill run is the run of its trigger time, once with the schedule's runs.
    scheduled = [e for e in effects if e.execution_id in rows and _of_trigger(rows[e.execution_id])]
    per_trigger = Counter((e.job_id, e.trigger_time) for e in scheduled)
    succeeded = {
        (int(r.job_id), int(r.trigger_time))
        for r in executions
        if r.status == "SUCCEEDED" and _of_trigger(r)
    }
    # A run recorded LOST may have had its effect before its worker died (README, "What
    # a handler must do"); its retry then does it again.
    lost = Counter(
        (int(r.job_id), int(r.trigger_time))
        for r in executions
        if r.status == "LOST" and _of_trigger(r)
    )
    for job_id, trigger_time in sorted(succeeded | set(per_trigger)):
        n, lost_runs = per_trigger[(job_id, trigger_time)], lost[(job_id, trigger_time)]
        if (job_id, trigger_time) not in succeeded:
            problems.append(
                f"job {job_id}: trigger {trigger_time} did its side effect {n} times "
                "and no run of it is recorded SUCCEEDED"
            )
        elif not 1 <= n <= 1 + lost_runs:
            more = f" (and one more for each of its {lost_runs} LOST runs)" if lost_runs else ""
            problems.append(
                f"job {job_id}: trigger {trigger_time} did its side effect {n} times, "
                f"expected 1{more}"
            )


def check_arrivals(
    problems: list[str],
    deliveries: Sequence[sa.Row[object]],
    arrivals: Counter[str],
    extra_posts: int,
) -> int:
    """Each DELIVERED callback reached its receiver under its ``webhook-id``, and none
    more often than its recorded POSTs allow; returns the copies beyond the first."""
    copies = 0
    for delivery in deliveries:
        n = arrivals.get(str(delivery.delivery_id), 0)
        copies += max(0, n - 1)
        where = f"job {delivery.job_id}: callback of {delivery.execution_id}"
        if delivery.status == "DELIVERED" and n == 0:
            problems.append(
                f"{where} DELIVERED, but its receiver never got webhook-id {delivery.delivery_id}"
            )
        elif n > int(delivery.attempts) + extra_posts:
            problems.append(
                f"{where} reached its receiver {n} times, "
                f"with {delivery.attempts} POSTs recorded (and {extra_posts} allowed unrecorded)"
            )
    return copies


def check_strangers(problems: list[str], delivery_ids: set[str], arrivals: Counter[str]) -> None:
    """Every callback that arrived is one of a delivery the books read."""
    for webhook_id, n in sorted(arrivals.items()):
        if webhook_id not in delivery_ids:
            problems.append(f"{n} callbacks arrived as webhook-id {webhook_id!r}, of no delivery")
