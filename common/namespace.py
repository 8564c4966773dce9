"""Preparing a namespace: its database, schema and vhost; creating app credentials."""

from __future__ import annotations

from common.clock import wall_ms
from common.config import StoreSettings
from common.db.apps import AppCredentials, create_app
from common.db.engine import ensure_database, make_engine, migrate
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
        with engine.begin() as conn:
            return create_app(conn, name, wall_ms(), handlers)
    finally:
        engine.dispose()
