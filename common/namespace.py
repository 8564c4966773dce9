"""Preparing a namespace: its database, schema and vhost; creating app credentials."""

from __future__ import annotations

from common.clock import wall_ms
from common.config import StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.db.engine import ensure_database, make_engine, migrate
from common.errors import AppNameTakenError
from common.handler_patterns import HandlerPatterns
from common.vhost import ensure_vhost


def prepare_namespace(settings: StoreSettings) -> None:
    """Create the database and vhost when missing and bring the schema to head."""
    ensure_database(settings)
    engine = make_engine(settings, pool_size=1)
    try:
        migrate(engine)
    finally:
        engine.dispose()
    ensure_vhost(settings)


def create_app_credentials(
    settings: StoreSettings, name: str, handlers: HandlerPatterns
) -> AppCredentials:
    """Create an app in the namespace, its jobs allowed the handlers ``handlers`` match,
    and return its one-time credentials."""
    engine = make_engine(settings, pool_size=1)
    try:
        with MySqlAppTransactions(engine).transaction() as apps:
            return apps.create_app(name, wall_ms(), handlers)
    finally:
        engine.dispose()


# How long the keys a reused app had keep working after ``app_api_key`` gives it a new one.
REUSED_APP_KEY_OVERLAP_MS = 24 * 3600 * 1000


def create_unique_app(
    settings: StoreSettings, name: str, handlers: HandlerPatterns, *, actor: str
) -> AppCredentials:
    """Create an app whose jobs may name the handlers ``handlers`` match, refused
    (``AppNameTakenError``) when an app has that name already: a name picks an app
    (``--app NAME``), so two of one name could not be told apart. ``actor``: whom the
    audit trail names."""
    engine = make_engine(settings, pool_size=1)
    try:
        with MySqlAppTransactions(engine).transaction() as apps:
            taken = [app.app_id for app in apps.all_apps() if app.name == name]
            if taken:
                raise AppNameTakenError(name, taken)
            now = wall_ms()
            created = apps.create_app(name, now, handlers)
            apps.audit_change(actor, "app.create", created.app_id, None, now)
            return created
    finally:
        engine.dispose()


def app_api_key(settings: StoreSettings, name: str, handlers: HandlerPatterns) -> tuple[str, bool]:
    """An API key for the app named ``name`` and whether that app existed: a new key for
    the oldest app of that name (its other keys work a day longer), else a new app whose
    jobs may name the handlers ``handlers`` match. So a stack started again (``kairos up
    --demo``) reuses its demo app."""
    engine = make_engine(settings, pool_size=1)
    try:
        with MySqlAppTransactions(engine).transaction() as apps:
            named = [app.app_id for app in apps.all_apps() if app.name == name]
            now = wall_ms()
            if named:
                key = apps.rotate_api_key(named[0], now, now + REUSED_APP_KEY_OVERLAP_MS)
                assert key is not None  # the app was read in this transaction
                return key.api_key, True
            return apps.create_app(name, now, handlers).api_key, False
    finally:
        engine.dispose()
