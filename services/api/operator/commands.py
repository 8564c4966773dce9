"""Operator commands: apps and their keys, dead-lettered callbacks, stuck executions."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import redis

from common.broker import BatchPublisher, connect
from common.clock import ClusterClock, wall_ms
from common.config import StoreSettings
from common.db.apps import AppStore, MySqlAppStore, MySqlAppTransactions
from common.db.engine import make_engine
from common.db.stuck_executions import find_unfinished
from common.errors import RotationOpenError, UnknownAppError
from common.handler_patterns import HandlerPatterns
from common.keys import RedisKeys
from common.operator_roles import EVERY_APP, AppScope
from common.timefmt import iso_ms
from common.topology import declare_core
from services.api.operator.dead_letters import ReplayReport, replay_dead
from services.api.operator.execution_control import (
    ExecutionStores,
    fail_execution,
    list_stuck,
    requeue_execution,
)
from services.api.operator.one_transaction import in_transaction

T = TypeVar("T")


def _in_transaction(settings: StoreSettings, work: Callable[[AppStore], T]) -> T:
    """Run ``work`` on the apps in one transaction on a short-lived engine of its own."""
    return in_transaction(settings, lambda conn: work(MySqlAppStore(conn)))


@dataclass(frozen=True)
class SecretRotation:
    """A new signing secret, and until when the previous one still signs too."""

    signing_secret: str
    previous_valid_until_ms: int


def list_apps(settings: StoreSettings) -> str:
    """A table of apps: id, creation time, state (``enabled`` or ``disabled``), handler
    patterns (``(none)`` when the app may name no handler), name."""
    listed = _in_transaction(settings, lambda apps: apps.all_apps())
    if not listed:
        return "no app yet: `kairos app create NAME` makes one"
    lines = [f"{'APP_ID':22} {'CREATED':24} {'STATE':8} {'HANDLERS':16}  NAME"]
    for app in listed:
        shown = ",".join(app.handlers.patterns) or "(none)"
        state = "enabled" if app.disabled_at is None else "disabled"
        created = iso_ms(app.created_at)
        lines.append(f"{app.app_id:22} {created!s:24} {state:8} {shown:16}  {app.name}")
    return "\n".join(lines)


def app_handler_patterns(settings: StoreSettings, app_id: str) -> HandlerPatterns:
    """The handlers an app may name. Raises ``UnknownAppError``."""
    found = _in_transaction(settings, lambda apps: apps.handler_patterns(app_id))
    if found is None:
        raise UnknownAppError(app_id)
    return found


def set_app_handler_patterns(
    settings: StoreSettings, app_id: str, patterns: HandlerPatterns, *, actor: str
) -> dict[str, int]:
    """Grant an app ``patterns`` (``EVERY_HANDLER``: all); return how many of
    its live jobs name each handler the patterns leave out (they keep their schedule).
    Raises ``UnknownAppError``."""

    def change(apps: AppStore) -> dict[str, int] | None:
        before = apps.app_record(app_id)
        if not apps.set_handler_patterns(app_id, patterns):
            return None
        apps.audit_change(actor, "app.handlers", app_id, before, wall_ms())
        in_use = apps.live_job_handlers(app_id)
        return {h: n for h, n in sorted(in_use.items()) if not patterns.allows(h)}

    outside = _in_transaction(settings, change)
    if outside is None:
        raise UnknownAppError(app_id)
    return outside


def rotate_app_secret(
    settings: StoreSettings,
    app_id: str,
    overlap_hours: float,
    force: bool = False,
    *,
    actor: str,
) -> SecretRotation:
    """Give an app a new signing secret; callbacks carry a signature with the old one too
    for ``overlap_hours``, on the cluster clock the notifier reads. Raises
    ``UnknownAppError``, and ``RotationOpenError`` while an earlier overlap is still
    open (unless ``force``)."""
    client = redis.Redis.from_url(settings.redis_url)
    engine = make_engine(settings, pool_size=1)
    try:
        now = ClusterClock(client).now_ms()
        until = now + int(overlap_hours * 3_600_000)
        with MySqlAppTransactions(engine).transaction() as apps:
            before = apps.app_record(app_id)
            secret = apps.rotate_signing_secret(app_id, now, until, force)
            open_until = None if secret else apps.previous_secret_until(app_id)
            if secret:
                extra = {"signingSecret": "rotated", "previousUntil": iso_ms(until)}
                apps.audit_change(actor, "app.rotate_secret", app_id, before, now, extra)
    finally:
        engine.dispose()
        client.close()
    if secret is None:
        # Refused with the app there means an overlap still open; else no such app.
        if open_until is None:
            raise UnknownAppError(app_id)
        raise RotationOpenError(app_id, str(iso_ms(open_until)))
    return SecretRotation(secret, until)


def replay_dead_callbacks(
    settings: StoreSettings,
    limit: int,
    delivery_id: str | None = None,
    scope: AppScope = EVERY_APP,
    *,
    actor: str,
) -> ReplayReport:
    """Move up to ``limit`` messages from the dead-letter queue back to the callbacks
    queue, or only the one of ``delivery_id`` (``services.api.operator.dead_letters``),
    only those of the apps in ``scope``; messages no notifier can read stay parked."""
    with _execution_stores(settings) as stores:
        connection = connect(settings, "kairos callbacks replay")
        try:
            now = stores.clock.now_ms()
            return replay_dead(
                connection, stores.engine, now, limit, delivery_id, scope, actor=actor
            )
        finally:
            connection.close()


@contextmanager
def _execution_stores(settings: StoreSettings) -> Iterator[ExecutionStores]:
    """Short-lived stores for one operator command on executions."""
    engine = make_engine(settings, pool_size=1)
    client = redis.Redis.from_url(settings.redis_url)
    try:
        yield ExecutionStores(
            engine,
            client,
            RedisKeys(settings.namespace),
            ClusterClock(client),
            settings.idempotency_ttl_seconds,
        )
    finally:
        engine.dispose()
        client.close()


def stuck_executions(settings: StoreSettings, older_than_ms: int) -> list[dict[str, object]]:
    """Executions QUEUED or overdue SCHEDULED for longer than ``older_than_ms``, as dicts."""
    with _execution_stores(settings) as stores:
        now = stores.clock.now_ms()
        return [view.as_dict(now) for view in list_stuck(stores, older_than_ms)]


def fail_stuck(
    settings: StoreSettings,
    execution_id: str,
    reason: str,
    wait_s: float,
    scope: AppScope = EVERY_APP,
    *,
    actor: str,
) -> bool:
    """Fail an unfinished execution (of an app in ``scope``) by hand; True once a
    dispatcher recorded it (within ``wait_s``), False if it is published but not
    recorded yet."""
    with _execution_stores(settings) as stores:
        connection = connect(settings, "kairos executions fail")
        try:
            declare_core(connection.channel())
            publisher = BatchPublisher(connection.channel())
            fail_execution(stores, publisher, execution_id, reason, scope, actor=actor)
        finally:
            connection.close()
        return _wait_ended(stores, execution_id, wait_s)


def _wait_ended(stores: ExecutionStores, execution_id: str, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        with stores.engine.connect() as conn:
            if find_unfinished(conn, execution_id) is None:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def requeue_stuck(settings: StoreSettings, execution_id: str, actor: str) -> None:
    """Hand an execution that never started back to the firer (``actor``: whom the
    audit trail names)."""
    with _execution_stores(settings) as stores:
        requeue_execution(stores, execution_id, actor=actor)
