"""What the apps aggregate hands out: apps as the API, operators, the dispatcher and the
audit trail see them, their keys as operators list them, and the fresh keys and secrets
made for them (shown once, stored as a hash or on the app's row)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import secrets
from dataclasses import dataclass, field

from common.callback_urls import IPNetwork, networks_from_stored
from common.db.audit import AuditEntry
from common.db.records import MOST_RETRIES, NO_LIMITS, AppLimits
from common.db.rows import AnyRow
from common.documents import JsonObject
from common.handler_patterns import EVERY_HANDLER, NO_HANDLER, HandlerPatterns

# How far back the start lag of an app's runs is read.
LAG_WINDOW_MS = 600_000
QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class AppCredentials:
    """What ``kairos app create`` prints once; the API key is never stored in clear."""

    app_id: str
    api_key: str
    signing_secret: str
    key_id: str = ""


@dataclass(frozen=True)
class App:
    """An app as the API sees it after authentication."""

    id: int
    app_id: str
    name: str
    handlers: HandlerPatterns = NO_HANDLER
    # Set by `kairos app disable`: the API refuses every call (403).
    disabled: bool = False
    # How long after the lookup the key the request carried stops working (an
    # overlapping rotation), in ms; None: until it is revoked.
    key_expires_in_ms: int | None = None
    # The networks its callbacks may reach although not public; None: the default.
    callback_networks: tuple[IPNetwork, ...] | None = None
    limits: AppLimits = NO_LIMITS
    # Who acts as this app, for the audit trail: the API key's id on the OpenAPI; an
    # operator's name (console) or cli:<os user> when an operator acts as the job's app.
    actor: str = ""

    @property
    def who(self) -> str:
        """The actor the audit trail names for what is done as this app."""
        return self.actor or f"app:{self.app_id}"


@dataclass(frozen=True, slots=True)
class AppRecord:
    """An app as operators list it: no key, no secret."""

    app_id: str
    name: str
    created_at: int
    handlers: HandlerPatterns
    disabled_at: int | None
    callback_networks: tuple[IPNetwork, ...] | None = None
    limits: AppLimits = NO_LIMITS
    id: int = 0

    @classmethod
    def from_row(cls, row: AnyRow) -> AppRecord:
        """The app a row of ``APP_RECORD_COLUMNS`` holds."""
        return cls(
            app_id=row.app_id,
            name=row.name,
            created_at=row.created_at,
            handlers=HandlerPatterns.from_stored(row.handler_patterns),
            disabled_at=row.disabled_at,
            callback_networks=networks_from_stored(row.callback_networks),
            limits=AppLimits.from_row(row),
            id=int(row.id),
        )


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """One of an app's API keys as operators list it: its id and times, never the key."""

    key_id: str
    created_at: int
    expires_at: int | None
    revoked_at: int | None

    @classmethod
    def from_row(cls, row: AnyRow) -> ApiKeyRecord:
        """The key a row of ``app_keys``'s query holds."""
        return cls(
            key_id=row.key_id,
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
        )


@dataclass(frozen=True)
class NewApiKey:
    """A key just made: its public id (to revoke it by) and the key, shown once."""

    key_id: str
    api_key: str


@dataclass(frozen=True)
class AppPolicy:
    """An app's share of the slots (``weight``), the most runs it may have going at once
    (``max_running``, None for no cap), the most retries a failed run of its gets
    (``max_retries``) and its fences as dispatch applies them."""

    app_id: str = ""
    weight: int = 1
    max_running: int | None = None
    disabled: bool = False
    handlers: HandlerPatterns = EVERY_HANDLER
    max_retries: int = MOST_RETRIES


# An app the dispatcher has no row for (created since it last read them): the defaults.
DEFAULT_POLICY = AppPolicy()


@dataclass(frozen=True)
class AppActivity:
    """One app's standing: ``waiting`` due runs with no slot yet, ``running`` runs going
    (in a worker's queue or running), and, when read for that app alone, the start lag
    of its first attempts started in the last ``LAG_WINDOW_MS`` (seconds by quantile,
    and how many started)."""

    app_pk: int
    app_id: str
    name: str
    weight: int
    max_running: int | None
    waiting: int
    running: int
    started: int = 0
    start_lag: dict[float, float] = field(default_factory=dict)
    max_start_lag: float | None = None


def activity_of(
    app_pk: int,
    app_id: str,
    name: str,
    limits: tuple[int, int | None],
    counts: tuple[int, int],
    lags: list[float],
) -> AppActivity:
    """An app's standing from its weight and cap, its waiting and running counts and
    the sorted start lags of its runs (none unless read for that app alone)."""
    return AppActivity(
        app_pk,
        app_id,
        name,
        limits[0],
        limits[1],
        counts[0],
        counts[1],
        len(lags),
        {q: _quantile(lags, q) for q in QUANTILES} if lags else {},
        lags[-1] if lags else None,
    )


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def app_document(record: AppRecord | None) -> JsonObject | None:
    """What the audit trail keeps of an app: no key, no secret."""
    if record is None:
        return None
    networks = record.callback_networks
    return {
        "name": record.name,
        "handlers": list(record.handlers.patterns),
        "callbackNetworks": None if networks is None else [str(n) for n in networks],
        "limits": dataclasses.asdict(record.limits),
        "disabled": record.disabled_at is not None,
    }


def app_change(
    actor: str,
    action: str,
    before: AppRecord | None,
    after: AppRecord,
    extra: JsonObject | None = None,
) -> AuditEntry:
    """The audit row of ``action`` on an app: as it was (``before``) and as it is
    (``after``), with ``extra`` facts (a new key's id) added after."""
    doc_after = {**(app_document(after) or {}), **(extra or {})}
    return AuditEntry(actor, action, "app", after.app_id, after.id, app_document(before), doc_after)


def hash_api_key(api_key: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_api_key() -> str:
    """A fresh API key, shown once and stored only as its hash."""
    return "kairos_" + secrets.token_urlsafe(32)


def new_signing_secret() -> str:
    """A fresh Standard Webhooks signing secret (32 random bytes)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_key_id() -> str:
    """The public id of an API key, which names it in `kairos app keys` and revoke-key."""
    return "key_" + secrets.token_hex(8)


def new_app_id() -> str:
    """The public id of a new app (``appId``)."""
    return "app_" + secrets.token_hex(8)
