"""The rows of the apps aggregate in memory: an ``apps`` row and an ``api_keys`` row."""

from __future__ import annotations

from dataclasses import dataclass

from common.callback_urls import IPNetwork
from common.db.apps.records import AppPolicy, AppRecord
from common.db.records import NO_LIMITS, AppLimits
from common.handler_patterns import NO_HANDLER, HandlerPatterns


@dataclass
class MemoryApp:
    """An ``apps`` row: the app, its key's hash, its signing secrets and its grants."""

    id: int
    app_id: str
    name: str = ""
    api_key_hash: str = ""
    signing_secret: str = ""
    created_at: int = 0
    handlers: HandlerPatterns = NO_HANDLER
    disabled_at: int | None = None
    callback_networks: tuple[IPNetwork, ...] | None = None
    limits: AppLimits = NO_LIMITS
    previous_signing_secret: str | None = None
    previous_secret_until: int | None = None

    def record(self) -> AppRecord:
        """The app as operators list it."""
        return AppRecord(
            self.app_id,
            self.name,
            self.created_at,
            self.handlers,
            self.disabled_at,
            self.callback_networks,
            self.limits,
            self.id,
        )

    def policy(self) -> AppPolicy:
        """The app as the dispatcher applies it."""
        return AppPolicy(
            self.app_id,
            max(1, self.limits.weight),
            self.limits.max_running,
            self.disabled_at is not None,
            self.handlers,
            self.limits.max_retries,
        )


@dataclass
class MemoryApiKey:
    """An ``api_keys`` row: one key of an app, by its hash."""

    key_id: str
    app_pk: int
    key_hash: str
    created_at: int
    expires_at: int | None = None
    revoked_at: int | None = None
