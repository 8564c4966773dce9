"""The apps aggregate in memory: ``AppStore``'s twin (``common.db.apps``) over the
in-memory apps and API keys tables, reading the jobs and executions tables as the SQL
does, and keeping the audit rows it writes. The store's clock (``database_now_ms``,
which keys end by) is ``MemoryTables.clock``; an app's start lag is read from all its
recent runs, without the SQL's cap on how many one read looks at."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from common.callback_urls import IPNetwork, networks_from_stored, stored_networks
from common.db.apps.records import (
    LAG_WINDOW_MS,
    ApiKeyRecord,
    App,
    AppActivity,
    AppCredentials,
    AppPolicy,
    AppRecord,
    NewApiKey,
    activity_of,
    app_change,
    hash_api_key,
    new_api_key,
    new_app_id,
    new_key_id,
    new_signing_secret,
)
from common.db.job_control import ACTIVE
from common.db.records import AppLimits
from common.documents import JsonObject
from common.handler_patterns import HandlerPatterns
from common.memory.app_rows import MemoryApiKey, MemoryApp
from common.memory.tables import MemoryTables
from common.operator_roles import EVERY_APP, AppScope
from common.states import ExecutionStatus


class AppKeyTables(MemoryTables):
    """``AppKeys`` in memory."""

    def put_policy(self, app_pk: int, policy: AppPolicy) -> None:
        """Seed (or overwrite) app ``app_pk`` so that the dispatcher reads ``policy``."""
        limits = AppLimits(
            weight=policy.weight, max_running=policy.max_running, max_retries=policy.max_retries
        )
        disabled_at = 0 if policy.disabled else None
        self.apps[app_pk] = MemoryApp(
            app_pk, policy.app_id, handlers=policy.handlers, disabled_at=disabled_at, limits=limits
        )
        self._next_app_pk = max(self._next_app_pk, app_pk + 1)

    def _named(self, app_id: str) -> MemoryApp | None:
        return next((a for a in self.apps.values() if a.app_id == app_id), None)

    def _add_key(self, app_pk: int, api_key: str, now_ms: int) -> str:
        key_id = new_key_id()
        self.api_keys.append(MemoryApiKey(key_id, app_pk, hash_api_key(api_key), now_ms))
        return key_id

    def create_app(self, name: str, now_ms: int, handlers: HandlerPatterns) -> AppCredentials:
        """Create an app with a fresh API key and signing secret."""
        api_key, secret = new_api_key(), new_signing_secret()
        pk = self._next_app_pk
        self._next_app_pk += 1
        stored = HandlerPatterns.from_stored(handlers.stored())
        app = MemoryApp(pk, new_app_id(), name, hash_api_key(api_key), secret, now_ms, stored)
        self.apps[pk] = app
        return AppCredentials(app.app_id, api_key, secret, self._add_key(pk, api_key, now_ms))

    def rotate_api_key(self, app_id: str, now_ms: int, until_ms: int) -> NewApiKey | None:
        """A new API key; the app's other keys end by ``until_ms`` at the latest."""
        app = self._named(app_id)
        if app is None:
            return None
        api_key = new_api_key()
        for key in self._keys_of(app.id):
            if key.revoked_at is None and (key.expires_at is None or key.expires_at > until_ms):
                key.expires_at = until_ms
        key_id = self._add_key(app.id, api_key, now_ms)
        app.api_key_hash = hash_api_key(api_key)
        return NewApiKey(key_id, api_key)

    def _keys_of(self, app_pk: int) -> list[MemoryApiKey]:
        return [k for k in self.api_keys if k.app_pk == app_pk]

    def revoke_api_key(self, app_id: str, key_id: str, now_ms: int) -> bool:
        """Stop one of the app's keys; False if the app has no such key."""
        app = self._named(app_id)
        found = [k for k in self._keys_of(app.id) if k.key_id == key_id] if app else []
        for key in found:
            if key.revoked_at is None:
                key.revoked_at = now_ms
        return bool(found)

    def app_keys(self, app_id: str) -> list[ApiKeyRecord] | None:
        """The app's API keys, oldest first; None if no such app."""
        app = self._named(app_id)
        if app is None:
            return None
        return [
            ApiKeyRecord(k.key_id, k.created_at, k.expires_at, k.revoked_at)
            for k in self._keys_of(app.id)
        ]

    def database_now_ms(self) -> int:
        """The store's clock."""
        return self.clock()

    def find_app_by_key(self, api_key: str) -> App | None:
        """The app that owns ``api_key`` while the key works on the store's clock."""
        now, wanted = self.clock(), hash_api_key(api_key)
        for key in self.api_keys:
            ends = key.expires_at
            if key.key_hash != wanted or key.revoked_at is not None:
                continue
            if ends is not None and ends <= now:
                continue
            app = self.apps[key.app_pk]
            return App(
                app.id,
                app.app_id,
                app.name,
                app.handlers,
                app.disabled_at is not None,
                None if ends is None else ends - now,
                app.callback_networks,
                app.limits,
                key.key_id,
            )
        return None

    def rotate_signing_secret(
        self, app_id: str, now_ms: int, until_ms: int, force: bool = False
    ) -> str | None:
        """A new signing secret, the old one kept until ``until_ms``."""
        app = self._named(app_id)
        until = None if app is None else app.previous_secret_until
        if app is None or not (force or until is None or until <= now_ms):
            return None
        secret = new_signing_secret()
        app.previous_signing_secret, app.previous_secret_until = app.signing_secret, until_ms
        app.signing_secret = secret
        return secret

    def previous_secret_until(self, app_id: str) -> int | None:
        """Until when the app's previous signing secret signs too."""
        app = self._named(app_id)
        return None if app is None else app.previous_secret_until

    def signing_secrets(self, app_pk: int, now_ms: int) -> list[str]:
        """The current secret, then the previous one while its overlap lasts."""
        app = self.apps.get(app_pk)
        if app is None:
            return []
        found = [app.signing_secret]
        if app.previous_signing_secret and (app.previous_secret_until or 0) > now_ms:
            found.append(app.previous_signing_secret)
        return found


class AppGrantTables(AppKeyTables):
    """``AppGrants`` in memory."""

    def _changed(self, app_id: str, **values: object) -> bool:
        app = self._named(app_id)
        if app is not None:
            for name, value in values.items():
                setattr(app, name, value)
        return app is not None

    def set_disabled(self, app_id: str, disabled_at: int | None) -> bool:
        """Disable the app at ``disabled_at`` (None enables it); False if no such app."""
        return self._changed(app_id, disabled_at=disabled_at)

    def set_handler_patterns(self, app_id: str, patterns: HandlerPatterns) -> bool:
        """Grant the app ``patterns``; False if no such app."""
        return self._changed(app_id, handlers=HandlerPatterns.from_stored(patterns.stored()))

    def handler_patterns(self, app_id: str) -> HandlerPatterns | None:
        """The handlers the app may name; None if no such app."""
        app = self._named(app_id)
        return None if app is None else app.handlers

    def set_callback_networks(self, app_id: str, networks: Sequence[IPNetwork] | None) -> bool:
        """Let the app's callbacks reach ``networks``; False if no such app."""
        stored = networks_from_stored(stored_networks(networks))
        return self._changed(app_id, callback_networks=stored)

    def callback_networks(self, app_pk: int) -> tuple[IPNetwork, ...] | None:
        """The networks the app's callbacks may reach; None for the default."""
        app = self.apps.get(app_pk)
        return None if app is None else app.callback_networks

    def set_limits(self, app_id: str, limits: AppLimits) -> bool:
        """Store the app's limits; False if no such app."""
        return self._changed(app_id, limits=limits)

    def app_limits(self, app_pk: int) -> AppLimits | None:
        """The app's limits; None if no such app."""
        app = self.apps.get(app_pk)
        return None if app is None else app.limits

    def run_log_quotas(self) -> dict[int, int]:
        """The run-log quota of every app that has one."""
        quotas = {pk: a.limits.run_log_bytes_per_hour for pk, a in self.apps.items()}
        return {pk: q for pk, q in quotas.items() if q is not None}

    def app_policies(self) -> dict[int, AppPolicy]:
        """Every app's policy, by primary key."""
        return {pk: app.policy() for pk, app in self.apps.items()}


class AppTables(AppGrantTables):
    """``AppStore`` in memory: keys, grants and reads."""

    def all_apps(self) -> list[AppRecord]:
        """Every app, oldest first."""
        return [app.record() for _, app in sorted(self.apps.items())]

    def app_record(self, app_id: str) -> AppRecord | None:
        """One app as ``all_apps`` lists it; None if no such app."""
        app = self._named(app_id)
        return None if app is None else app.record()

    def apps_by_key(self, scope: AppScope = EVERY_APP) -> dict[int, App]:
        """Every app in ``scope`` by its primary key, by name."""
        named = sorted(self.apps.values(), key=lambda a: a.name)
        return {
            a.id: App(a.id, a.app_id, a.name, a.handlers, disabled=a.disabled_at is not None)
            for a in named
            if scope.includes(a.id)
        }

    def _live_jobs(self, app_pk: int) -> list[str]:
        """The handlers of the app's jobs not ended and not deleted, one per job."""
        return [
            j.handler
            for j in self.jobs.values()
            if j.app_pk == app_pk and j.status in ACTIVE and not j.deleted
        ]

    def live_job_handlers(self, app_id: str) -> dict[str, int]:
        """How many of the app's live jobs name each handler."""
        app = self._named(app_id)
        return {} if app is None else dict(Counter(self._live_jobs(app.id)))

    def stored_job_count(self, app_pk: int) -> int:
        """How many jobs the app keeps stored: not ended and not deleted."""
        return len(self._live_jobs(app_pk))

    def running_by_app(self) -> dict[int, int]:
        """How many executions each app has QUEUED."""
        queued = ExecutionStatus.QUEUED
        apps = (self.jobs[r.job_id].app_pk for r in self.executions.values() if r.status is queued)
        return dict(Counter(apps))

    def _waiting_by_app(self, now_ms: int) -> dict[int, int]:
        waiting = (
            self.jobs[r.job_id].app_pk
            for r in self.executions.values()
            if r.status is ExecutionStatus.SCHEDULED
            and r.scheduled_at is not None
            and r.scheduled_at <= now_ms
        )
        return dict(Counter(waiting))

    def app_activity(self, now_ms: int, app_id: str | None = None) -> list[AppActivity]:
        """Every app's standing (or ``app_id``'s alone, with its start lag), by app id."""
        found = [a for a in self.apps.values() if app_id is None or a.app_id == app_id]
        waiting, running = self._waiting_by_app(now_ms), self.running_by_app()
        out = []
        for app in sorted(found, key=lambda a: a.app_id):
            lags = self._start_lags(app.id, now_ms - LAG_WINDOW_MS) if app_id is not None else []
            limits = (app.limits.weight, app.limits.max_running)
            counts = (waiting.get(app.id, 0), running.get(app.id, 0))
            out.append(activity_of(app.id, app.app_id, app.name, limits, counts, lags))
        return out

    def _start_lags(self, app_pk: int, since_ms: int) -> list[float]:
        return sorted(
            max(0, r.started_at - r.trigger_time) / 1000
            for r in self.executions.values()
            if self.jobs[r.job_id].app_pk == app_pk
            and r.trigger_time >= since_ms
            and r.attempt == 1
            and not r.manual
            and r.started_at is not None
        )

    def audit_change(
        self,
        actor: str,
        action: str,
        app_id: str,
        before: AppRecord | None,
        now_ms: int,
        extra: JsonObject | None = None,
    ) -> None:
        """Keep the audit row of ``action`` on app ``app_id``, as the SQL writes it."""
        after = self.app_record(app_id)
        if after is not None:
            self.audit.append((now_ms, app_change(actor, action, before, after, extra)))
