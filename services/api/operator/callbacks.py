"""Operator commands on callbacks: the receiving hosts the notifiers report, list the
dead ones, replay by delivery, by job, or every dead one (``kairos callbacks``)."""

from __future__ import annotations

from dataclasses import dataclass

from common.broker import connect
from common.db.apps import App, MySqlAppStore, MySqlAppTransactions
from common.db.audit import audit_replays
from common.db.deliveries import DeliveryRecord
from common.db.delivery_store import MySqlDeliveryStore
from common.notifier_standing import (
    AppStanding,
    HostStanding,
    merged_apps,
    merged_hosts,
    read_standings,
)
from common.operator_roles import AppScope
from common.states import DeliveryStatus
from services.api.operator.dead_letters import ReplayReport, replay_dead
from services.api.operator.jobs import find_app
from services.api.state import ApiState


@dataclass(frozen=True)
class ReceivingHosts:
    """What the live notifiers report: each receiving host and each app's callbacks
    (added up over the notifiers), how many notifiers reported, and the apps by row id."""

    hosts: list[HostStanding]
    apps: list[AppStanding]
    notifiers: int
    names: dict[int, App]

    def within(self, scope: AppScope) -> ReceivingHosts:
        """Only the apps in ``scope``; the hosts (shared by every app's callbacks) only
        for a scope of every app."""
        if scope.every_app:
            return self
        apps = [a for a in self.apps if scope.includes(a.app_pk)]
        names = {pk: app for pk, app in self.names.items() if scope.includes(pk)}
        return ReceivingHosts([], apps, self.notifiers, names)


def receiving_hosts(state: ApiState) -> ReceivingHosts:
    """The receiving hosts and apps as the notifiers' last reports (seconds old) have
    them, busiest first."""
    standings = read_standings(state.redis, state.keys)
    with MySqlAppTransactions(state.engine).reading() as apps:
        names = apps.apps_by_key()
    return ReceivingHosts(merged_hosts(standings), merged_apps(standings), len(standings), names)


@dataclass(frozen=True)
class DeadLine:
    """One dead delivery and the app it belongs to."""

    delivery: DeliveryRecord
    app: App | None


def dead_callbacks(state: ApiState, app: str | None, limit: int) -> list[DeadLine]:
    """Dead deliveries, most recently parked first; only ``app``'s (an app id or a
    unique name) when given. Raises ``UnknownAppError``."""
    with state.engine.connect() as conn:
        apps = MySqlAppStore(conn).apps_by_key()
        app_pk = find_app(apps, app).id if app is not None else None
        dead = MySqlDeliveryStore(conn).dead_deliveries(limit, app_pk)
    return [DeadLine(d, apps.get(d.app_pk) if d.app_pk is not None else None) for d in dead]


def replay_delivery(state: ApiState, delivery_id: str, actor: str) -> int:
    """Start one DEAD or DELIVERED delivery again (the dispatcher sends it within
    seconds); how many moved (0 or 1). ``actor``: whom the audit trail names."""
    with state.engine.begin() as conn:
        store = MySqlDeliveryStore(conn)
        found = store.get_delivery(delivery_id)
        now = state.clock.now_ms()
        if found is None or not store.start_again(delivery_id, now):
            return 0
        audit_replays(conn, actor, [(delivery_id, found.app_pk)], found.status.value, now)
        return 1


def replay_job(state: ApiState, job_id: int, actor: str) -> int:
    """Start every DEAD delivery of one job again; how many moved."""
    with state.engine.begin() as conn:
        store = MySqlDeliveryStore(conn)
        now = state.clock.now_ms()
        moved = [
            (d.delivery_id, d.app_pk)
            for d in store.dead_of_job(job_id)
            if store.start_again(d.delivery_id, now)
        ]
        audit_replays(conn, actor, moved, DeliveryStatus.DEAD.value, now)
        return len(moved)


def replay_all_dead(state: ApiState, limit: int, actor: str) -> ReplayReport:
    """Every dead callback in the dead-letter queue back to the callbacks queue."""
    connection = connect(state.settings, "kairos callbacks replay")
    try:
        now = state.clock.now_ms()
        return replay_dead(connection, state.engine, now, limit, actor=actor)
    finally:
        if connection.is_open:
            connection.close()
