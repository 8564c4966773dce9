"""Operator commands on who may call the API and what an app is granted: an app's API
keys (rotate with an overlap, revoke, list), disabling or enabling it, the networks its
callbacks may reach and its limits.

Times are on the database's clock, the one the API checks keys against (so that
authentication needs MySQL alone), not on the clock of the host the command runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from common.callback_urls import IPNetwork
from common.config import StoreSettings
from common.db.apps import ApiKeyRecord, AppRecord, AppStore, MySqlAppTransactions, NewApiKey
from common.db.engine import make_engine
from common.db.records import AppLimits
from common.documents import JsonObject
from common.errors import UnknownAppError
from common.timefmt import iso_ms

T = TypeVar("T")


@dataclass(frozen=True)
class KeyRotation:
    """A new API key, and until when the app's earlier keys still work."""

    key: NewApiKey
    others_until_ms: int


def _at_database_time(settings: StoreSettings, work: Callable[[AppStore, int], T]) -> T:
    """Run ``work(apps, now_ms)`` in one transaction, ``now_ms`` from the database."""
    engine = make_engine(settings, pool_size=1)
    try:
        with MySqlAppTransactions(engine).transaction() as apps:
            return work(apps, apps.database_now_ms())
    finally:
        engine.dispose()


def _audited(
    actor: str,
    action: str,
    app_id: str,
    work: Callable[[AppStore, int], T],
    extra: JsonObject | None = None,
) -> Callable[[AppStore, int], T]:
    """``work``, followed in its transaction by the audit row of what it changed (none
    when it found no app or changed nothing), with ``extra`` facts added after."""

    def run(apps: AppStore, now: int) -> T:
        before = apps.app_record(app_id)
        result = work(apps, now)
        if before is not None and result is not None and result is not False:
            facts = dict(extra or {})
            if isinstance(result, KeyRotation):
                facts["newKeyId"] = result.key.key_id
            apps.audit_change(actor, action, app_id, before, now, facts)
        return result

    return run


def rotate_key(
    settings: StoreSettings, app_id: str, overlap_hours: float, *, actor: str
) -> KeyRotation:
    """Give an app a new API key; its other keys keep working for ``overlap_hours`` (0:
    they stop at once). Raises ``UnknownAppError``."""

    def rotate(apps: AppStore, now: int) -> KeyRotation | None:
        until = now + int(overlap_hours * 3_600_000)
        key = apps.rotate_api_key(app_id, now, until)
        return None if key is None else KeyRotation(key, until)

    rotation = _at_database_time(settings, _audited(actor, "app.rotate_key", app_id, rotate))
    if rotation is None:
        raise UnknownAppError(app_id)
    return rotation


def revoke_key(settings: StoreSettings, app_id: str, key_id: str, *, actor: str) -> bool:
    """Stop one API key of an app; False if the app has no such key. Raises
    ``UnknownAppError``."""

    def revoke(apps: AppStore, now: int) -> bool | None:
        if apps.app_keys(app_id) is None:
            return None
        return apps.revoke_api_key(app_id, key_id, now)

    revoked = _at_database_time(
        settings, _audited(actor, "app.revoke_key", app_id, revoke, {"revokedKeyId": key_id})
    )
    if revoked is None:
        raise UnknownAppError(app_id)
    return revoked


def keys_table(settings: StoreSettings, app_id: str) -> str:
    """A table of an app's API keys: id, creation, end, state now.
    Raises ``UnknownAppError``."""
    keys, now = _at_database_time(settings, lambda apps, now: (apps.app_keys(app_id), now))
    if keys is None:
        raise UnknownAppError(app_id)
    lines = [f"{'KEY_ID':22} {'CREATED':24} {'ENDS':24} STATE"]
    lines.extend(_key_line(key, now) for key in keys)
    return "\n".join(lines)


def _key_line(key: ApiKeyRecord, now_ms: int) -> str:
    """One key's line of ``keys_table``: its state at ``now_ms`` on the database's clock."""
    if key.revoked_at is not None:
        state = "revoked"
    elif key.expires_at is not None and key.expires_at <= now_ms:
        state = "expired"
    else:
        state = "active"
    ends = iso_ms(key.revoked_at if key.revoked_at is not None else key.expires_at) or "-"
    return f"{key.key_id:22} {iso_ms(key.created_at)!s:24} {ends:24} {state}"


def set_app_disabled(settings: StoreSettings, app_id: str, disabled: bool, *, actor: str) -> None:
    """Disable an app (every API call with its keys is refused) or enable it again.
    Raises ``UnknownAppError``."""

    def change(apps: AppStore, now: int) -> bool:
        return apps.set_disabled(app_id, now if disabled else None)

    action = "app.disable" if disabled else "app.enable"
    if not _at_database_time(settings, _audited(actor, action, app_id, change)):
        raise UnknownAppError(app_id)


def app_details(settings: StoreSettings, app_id: str) -> AppRecord:
    """One app: handlers, callback networks, limits, whether it is disabled (no secret).
    Raises ``UnknownAppError``."""
    found = _at_database_time(settings, lambda apps, now: apps.app_record(app_id))
    if found is None:
        raise UnknownAppError(app_id)
    return found


def set_app_networks(
    settings: StoreSettings, app_id: str, networks: Sequence[IPNetwork] | None, *, actor: str
) -> None:
    """Let an app's callbacks reach ``networks`` although they are not public (None: the
    cluster's default again). Raises ``UnknownAppError``."""

    def change(apps: AppStore, now: int) -> bool:
        return apps.set_callback_networks(app_id, networks)

    if not _at_database_time(settings, _audited(actor, "app.networks", app_id, change)):
        raise UnknownAppError(app_id)


def change_app_limits(
    settings: StoreSettings,
    app_id: str,
    update: Callable[[AppLimits], AppLimits],
    *,
    actor: str,
) -> AppRecord:
    """Store ``update(the app's limits now)`` in one transaction; the app as it then
    is. Raises ``UnknownAppError``."""

    def change(apps: AppStore, now: int) -> AppRecord | None:
        found = apps.app_record(app_id)
        if found is None:
            return None
        limits = update(found.limits)
        apps.set_limits(app_id, limits)
        return replace(found, limits=limits)

    changed = _at_database_time(settings, _audited(actor, "app.limits", app_id, change))
    if changed is None:
        raise UnknownAppError(app_id)
    return changed
