"""``AppStore``: every read and write of the apps aggregate, on one connection (or the
in-memory twin), and ``AppTransactions``, where a stage gets one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias

from common.callback_urls import IPNetwork
from common.db.apps.records import (
    ApiKeyRecord,
    App,
    AppActivity,
    AppCredentials,
    AppPolicy,
    AppRecord,
    NewApiKey,
)
from common.db.records import AppLimits
from common.db.store_transactions import StoreTransactions
from common.documents import JsonObject
from common.handler_patterns import HandlerPatterns
from common.operator_roles import EVERY_APP, AppScope


class AppKeys(Protocol):
    """An app's creation, API keys and signing secrets, and finding the app of a key."""

    def create_app(self, name: str, now_ms: int, handlers: HandlerPatterns) -> AppCredentials:
        """Create an app with a fresh API key and a Standard Webhooks signing secret; its
        jobs may name the handlers ``handlers`` match (``NO_HANDLER``: none until
        granted)."""
        ...

    def rotate_api_key(self, app_id: str, now_ms: int, until_ms: int) -> NewApiKey | None:
        """Give the app a new API key; its other keys keep working until ``until_ms`` (or
        their own earlier end). None if no such app."""
        ...

    def revoke_api_key(self, app_id: str, key_id: str, now_ms: int) -> bool:
        """Stop one of the app's keys; False if the app has no such key."""
        ...

    def app_keys(self, app_id: str) -> list[ApiKeyRecord] | None:
        """The app's API keys (id, created, expires, revoked; never the key), oldest
        first; None if no such app."""
        ...

    def database_now_ms(self) -> int:
        """The store's time in epoch ms, the clock API keys end by."""
        ...

    def find_app_by_key(self, api_key: str) -> App | None:
        """The app that owns ``api_key``, if the key is neither revoked nor past its end
        on the store's clock, with its grants and whether it is disabled."""
        ...

    def rotate_signing_secret(
        self, app_id: str, now_ms: int, until_ms: int, force: bool = False
    ) -> str | None:
        """Give the app a new signing secret; callbacks are signed with the old one as
        well until ``until_ms``. The new secret; None if no such app, or if an earlier
        rotation's overlap is still open at ``now_ms`` and ``force`` is not set."""
        ...

    def previous_secret_until(self, app_id: str) -> int | None:
        """Until when the app's previous signing secret signs too; None if no such app
        or it never rotated."""
        ...

    def signing_secrets(self, app_pk: int, now_ms: int) -> list[str]:
        """The secrets to sign the app's callbacks with: the current one, then the
        previous one while its overlap lasts; empty if no such app."""
        ...


class AppGrants(Protocol):
    """What an operator grants an app: handlers, callback networks, limits, and whether
    it may call at all; and those grants as each stage reads them."""

    def set_disabled(self, app_id: str, disabled_at: int | None) -> bool:
        """Disable the app at ``disabled_at`` (None enables it); False if no such app."""
        ...

    def set_handler_patterns(self, app_id: str, patterns: HandlerPatterns) -> bool:
        """Let the app's jobs name the handlers ``patterns`` allow; False if no such app
        (setting the patterns it has already counts as found)."""
        ...

    def handler_patterns(self, app_id: str) -> HandlerPatterns | None:
        """The handlers the app may name; None if no such app."""
        ...

    def set_callback_networks(self, app_id: str, networks: Sequence[IPNetwork] | None) -> bool:
        """Let the app's callbacks reach ``networks`` although they are not public (None:
        the cluster's default again); False if no such app."""
        ...

    def callback_networks(self, app_pk: int) -> tuple[IPNetwork, ...] | None:
        """The networks the app's callbacks may reach; None for the cluster's default
        (and for an app that is gone)."""
        ...

    def set_limits(self, app_id: str, limits: AppLimits) -> bool:
        """Store the app's limits, every one of them; False if no such app."""
        ...

    def app_limits(self, app_pk: int) -> AppLimits | None:
        """The limits of the app whose primary key is ``app_pk``; None if no such app."""
        ...

    def run_log_quotas(self) -> dict[int, int]:
        """The run-log quota (bytes per hour) of every app that has one, by primary key."""
        ...

    def app_policies(self) -> dict[int, AppPolicy]:
        """Every app's policy (weight, cap, disabled, handlers), by primary key."""
        ...


class AppReads(Protocol):
    """Apps as operators list them, what their jobs and runs amount to, and the audit
    row of a change to one."""

    def all_apps(self) -> list[AppRecord]:
        """Every app (no secrets), oldest first."""
        ...

    def app_record(self, app_id: str) -> AppRecord | None:
        """One app as ``all_apps`` lists it; None if no such app."""
        ...

    def apps_by_key(self, scope: AppScope = EVERY_APP) -> dict[int, App]:
        """Every app in ``scope`` by its primary key, by name (what operators' pages
        name jobs' apps by), with its handler patterns and whether it is disabled."""
        ...

    def live_job_handlers(self, app_id: str) -> dict[str, int]:
        """How many of the app's live jobs (waiting, running or paused, not deleted)
        name each handler; empty if no such app."""
        ...

    def stored_job_count(self, app_pk: int) -> int:
        """How many jobs the app keeps stored against its ``max_jobs``: not ended and
        not deleted."""
        ...

    def running_by_app(self) -> dict[int, int]:
        """How many runs each app has going (QUEUED: in a worker's queue or running)."""
        ...

    def app_activity(self, now_ms: int, app_id: str | None = None) -> list[AppActivity]:
        """Every app's standing (or ``app_id``'s alone, with its start lag), by app id."""
        ...

    def audit_change(
        self,
        actor: str,
        action: str,
        app_id: str,
        before: AppRecord | None,
        now_ms: int,
        extra: JsonObject | None = None,
    ) -> None:
        """Write the audit row of ``action`` on app ``app_id`` in this transaction: as it
        was (``before``) and as it is now, with ``extra`` facts added after; none if the
        app is not there."""
        ...


class AppStore(AppKeys, AppGrants, AppReads, Protocol):
    """The apps aggregate: apps, their API keys and signing secrets, their grants and
    limits, what they amount to, and the audit rows of changes to them."""


# Where a stage gets its ``AppStore``: a plain read, or a transaction.
AppTransactions: TypeAlias = StoreTransactions[AppStore]
