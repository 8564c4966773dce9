"""Firing alert rules on events, in the caller's transaction: each event matched to
the rules that cover it, their states locked, the gate asked, the states written back
and an alert delivery recorded for each alert sent (the notifier sends it as it sends
callbacks: signed, retried, dead-lettered)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy.engine import Connection

from common.alerts import state_rows
from common.alerts.gate import AlertState, admit, counted_failure, summarised
from common.alerts.kinds import STREAK_KIND, AlertKind
from common.alerts.payload import AlertEvent, alert_payload, summary_payload
from common.alerts.rules import AlertRule
from common.alerts.state_rows import LockedState, StateKey
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore

RUN_KIND_SET = frozenset({AlertKind.FAILED, AlertKind.LOST, AlertKind.TIMED_OUT})
SUMMARY_LIMIT = 500


def new_alert(rule: AlertRule, payload: str) -> NewDelivery:
    """The delivery of one alert to its rule's webhook."""
    return NewDelivery(
        delivery_id="msg_" + uuid.uuid4().hex,
        execution_id=None,
        job_id=None,
        app_pk=None,
        url=rule.url,
        payload=payload,
        alert_rule_pk=rule.rule_pk,
    )


def _key(rule: AlertRule, kind: str, subject: str) -> StateKey:
    return (rule.rule_pk, kind, subject[: state_rows.SUBJECT_CHARS])


def _counts_streak(rule: AlertRule, kind: AlertKind) -> bool:
    return rule.streak > 1 and kind in RUN_KIND_SET


@dataclass
class _Round:
    """The states of one firing, as they change, and the alerts it sends."""

    locked: dict[StateKey, LockedState]
    now_ms: int
    changed: dict[StateKey, AlertState]
    sent: list[NewDelivery]

    def state(self, key: StateKey) -> AlertState:
        if key in self.changed:
            return self.changed[key]
        return self.locked[key].state

    def fire(self, rule: AlertRule, event: AlertEvent) -> None:
        """One event through one rule: streak, told once (a worker), then the window."""
        key = _key(rule, event.kind, event.subject)
        if key not in self.locked:
            return
        state = self.state(key)
        if event.marker is not None:
            if state.marker == event.marker:
                return
            state = replace(state, marker=event.marker)
        streak = None
        if _counts_streak(rule, event.kind):
            streak_key = _key(rule, STREAK_KIND, event.subject)
            counted, reached = counted_failure(self.state(streak_key), rule.streak)
            self.changed[streak_key] = counted
            streak = counted.streak
            if not reached:
                return
        state, send = admit(state, self.now_ms, rule.every_ms)
        self.changed[key] = state
        if send is not None:
            payload = alert_payload(rule, event, send, streak, self.now_ms)
            self.sent.append(new_alert(rule, payload))

    def write(self, conn: Connection) -> None:
        changed = {k: LockedState(self.locked[k].state_pk, s) for k, s in self.changed.items()}
        state_rows.write_states(conn, changed, self.now_ms)
        MySqlDeliveryStore(conn).insert_deliveries(self.sent, self.now_ms)


def matches(
    rules: Sequence[AlertRule], events: Sequence[AlertEvent]
) -> list[tuple[AlertRule, AlertEvent]]:
    """Each event with each rule that covers it, in the events' order."""
    return [(r, e) for e in events for r in rules if r.covers(e.kind, e.app_pk)]


def fire_events(
    conn: Connection, rules: Sequence[AlertRule], events: Sequence[AlertEvent], now_ms: int
) -> list[NewDelivery]:
    """Fire ``events`` through ``rules`` in the caller's transaction; the alert
    deliveries recorded (PENDING), for the caller to publish or leave to the sweep.

    A rule removed since the caller read it fires nothing: the rules still there are
    share-locked first, so none goes while its states and alerts are written.
    """
    found = matches(rules, events)
    if not found:
        return []
    alive = state_rows.existing_rules(conn, {r.rule_pk for r, _ in found})
    found = [(r, e) for r, e in found if r.rule_pk in alive]
    keys: set[StateKey] = set()
    for rule, event in found:
        keys.add(_key(rule, event.kind, event.subject))
        if _counts_streak(rule, event.kind):
            keys.add(_key(rule, STREAK_KIND, event.subject))
    firing = _Round(state_rows.lock_states(conn, keys, now_ms), now_ms, {}, [])
    for rule, event in found:
        firing.fire(rule, event)
    firing.write(conn)
    return firing.sent


def send_summaries(conn: Connection, rules: Sequence[AlertRule], now_ms: int) -> list[NewDelivery]:
    """A summary for each state whose events were kept back and whose window is over
    with no alert since, in the caller's transaction; the alert deliveries recorded."""
    by_pk = {r.rule_pk: r for r in rules}
    changed: dict[StateKey, LockedState] = {}
    sent: list[NewDelivery] = []
    for due in state_rows.due_summaries(conn, now_ms, SUMMARY_LIMIT):
        rule_pk, kind, subject = due.key
        rule = by_pk.get(rule_pk)
        if rule is None or kind == STREAK_KIND:
            continue
        state, send = summarised(due.locked.state, now_ms)
        changed[due.key] = LockedState(due.locked.state_pk, state)
        sent.append(new_alert(rule, summary_payload(rule, AlertKind(kind), subject, send, now_ms)))
    state_rows.write_states(conn, changed, now_ms)
    MySqlDeliveryStore(conn).insert_deliveries(sent, now_ms)
    return sent
