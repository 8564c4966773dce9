"""``alert_states`` rows: locked for a firing transaction, written back after it."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import Connection

from common.alerts.gate import AlertState
from common.db.rows import AnyRow
from common.db.schema import alert_rules, alert_states

# (rule row id, kind, subject): one state.
StateKey = tuple[int, str, str]
SUBJECT_CHARS = 64


@dataclass(frozen=True, slots=True)
class LockedState:
    """A state row locked for the caller's transaction, and where it stood."""

    state_pk: int
    state: AlertState


def _state(row: AnyRow) -> AlertState:
    return AlertState(
        streak=int(row.streak),
        last_sent_at=row.last_sent_at,
        suppressed=int(row.suppressed),
        suppressed_since=row.suppressed_since,
        marker=row.marker,
    )


def existing_rules(conn: Connection, rule_pks: Collection[int]) -> set[int]:
    """Those of these rules that still exist, share-locked: none is removed before the
    caller's transaction ends (their states and alerts refer to them)."""
    if not rule_pks:
        return set()
    found = conn.execute(
        sa.select(alert_rules.c.id)
        .where(alert_rules.c.id.in_(sorted(rule_pks)))
        .with_for_update(read=True)
    ).scalars()
    return {int(pk) for pk in found}


def lock_states(
    conn: Connection, keys: Collection[StateKey], now_ms: int
) -> dict[StateKey, LockedState]:
    """The states of ``keys``, made where missing and locked, in key order."""
    ordered = sorted({(r, k, s[:SUBJECT_CHARS]) for r, k, s in keys})
    if not ordered:
        return {}
    insert = mysql_insert(alert_states).values(
        [{"rule_pk": r, "kind": k, "subject": s, "updated_at": now_ms} for r, k, s in ordered]
    )
    conn.execute(insert.on_duplicate_key_update(rule_pk=insert.inserted.rule_pk))
    rows = conn.execute(
        sa.select(alert_states)
        .where(
            sa.tuple_(alert_states.c.rule_pk, alert_states.c.kind, alert_states.c.subject).in_(
                ordered
            )
        )
        .order_by(alert_states.c.id)
        .with_for_update()
    ).all()
    return {(int(r.rule_pk), r.kind, r.subject): LockedState(int(r.id), _state(r)) for r in rows}


def write_states(conn: Connection, changed: Mapping[StateKey, LockedState], now_ms: int) -> None:
    """Write back the states changed (each with the row id it was locked with), in one
    multi-row statement: every row exists and is locked, so each VALUES row meets its
    own by primary key and only updates it."""
    if not changed:
        return
    rows = [
        {
            "id": locked.state_pk,
            "rule_pk": rule_pk,
            "kind": kind,
            "subject": subject,
            "streak": locked.state.streak,
            "last_sent_at": locked.state.last_sent_at,
            "suppressed": locked.state.suppressed,
            "suppressed_since": locked.state.suppressed_since,
            "marker": locked.state.marker,
            "updated_at": now_ms,
        }
        for (rule_pk, kind, subject), locked in sorted(changed.items(), key=lambda i: i[1].state_pk)
    ]
    upsert = mysql_insert(alert_states).values(rows)
    conn.execute(
        upsert.on_duplicate_key_update(
            {
                name: upsert.inserted[name]
                for name in (
                    "streak",
                    "last_sent_at",
                    "suppressed",
                    "suppressed_since",
                    "marker",
                    "updated_at",
                )
            }
        )
    )


def reset_streaks(
    conn: Connection, rule_pks: Sequence[int], job_ids: Collection[int], now_ms: int
) -> None:
    """A success of each of these jobs: their failures in a row start again from none."""
    if not rule_pks or not job_ids:
        return
    conn.execute(
        alert_states.update()
        .where(
            alert_states.c.rule_pk.in_(sorted(rule_pks)),
            alert_states.c.kind == "STREAK",
            alert_states.c.subject.in_(sorted(str(j) for j in job_ids)),
            alert_states.c.streak > 0,
        )
        .values(streak=0, updated_at=now_ms)
    )


@dataclass(frozen=True, slots=True)
class DueSummary:
    """A state with events kept back whose window is over: a summary to send."""

    key: StateKey
    locked: LockedState


def due_summaries(conn: Connection, now_ms: int, limit: int) -> list[DueSummary]:
    """States whose kept-back events wait for a summary, locked (passing over those
    another transaction holds), oldest alert first."""
    rows = conn.execute(
        sa.select(alert_states)
        .join(alert_rules, alert_rules.c.id == alert_states.c.rule_pk)
        .where(
            alert_states.c.suppressed > 0,
            alert_states.c.last_sent_at <= now_ms - alert_rules.c.every_seconds * 1000,
        )
        .order_by(alert_states.c.last_sent_at)
        .limit(limit)
        .with_for_update(skip_locked=True, of=alert_states)
    ).all()
    return [
        DueSummary((int(r.rule_pk), r.kind, r.subject), LockedState(int(r.id), _state(r)))
        for r in rows
    ]


def prune_alert_states(conn: Connection, before_ms: int, limit: int) -> int:
    """Delete up to ``limit`` states last changed before ``before_ms`` that owe nothing
    (no event kept back for a summary): retention's, as for executions."""
    keys = list(
        conn.execute(
            sa.select(alert_states.c.id)
            .where(alert_states.c.suppressed == 0, alert_states.c.updated_at < before_ms)
            .limit(limit)
        ).scalars()
    )
    if keys:
        conn.execute(alert_states.delete().where(alert_states.c.id.in_(sorted(keys))))
    return len(keys)
