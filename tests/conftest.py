"""Shared fixtures: a fresh namespace (database, Redis prefix, vhost) for every test.

The schema is migrated once per session into a template database; each test copies the
template's tables (``SHOW CREATE TABLE``), which is much faster than migrating anew.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import ensure_database, make_engine, migrate, server_url
from common.vhost import ensure_vhost
from tests.stores import drop_database, drop_redis_keys, drop_vhost

TEMPLATE = "t_template_" + secrets.token_hex(4)


def _settings(namespace: str) -> StoreSettings:
    return StoreSettings(namespace=namespace)


@pytest.fixture(scope="session")
def template_namespace() -> Iterator[str]:
    """A migrated database every test copies its schema from."""
    settings = _settings(TEMPLATE)
    ensure_database(settings)
    engine = make_engine(settings, pool_size=1)
    migrate(engine)
    engine.dispose()
    yield TEMPLATE
    drop_database(settings)


def _copy_schema(template: str, target: str, settings: StoreSettings) -> None:
    engine = sa.create_engine(server_url(settings), poolclass=sa.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{target}` CHARACTER SET utf8mb4"))
        tables = [r[0] for r in conn.execute(sa.text(f"SHOW TABLES FROM `{template}`"))]
        conn.execute(sa.text(f"USE `{target}`"))
        conn.execute(sa.text("SET FOREIGN_KEY_CHECKS=0"))
        for table in tables:
            ddl = conn.execute(sa.text(f"SHOW CREATE TABLE `{template}`.`{table}`")).one()[1]
            conn.execute(sa.text(ddl))
        conn.execute(
            sa.text(f"INSERT INTO alembic_version SELECT * FROM `{template}`.alembic_version")
        )
    engine.dispose()


@pytest.fixture
def namespace(template_namespace: str) -> Iterator[StoreSettings]:
    """Settings for a namespace no other test sees; everything in it is removed after."""
    settings = _settings("t_" + secrets.token_hex(6))
    _copy_schema(template_namespace, settings.namespace, settings)
    ensure_vhost(settings)
    yield settings
    drop_vhost(settings)
    drop_database(settings)
    drop_redis_keys(settings)


@pytest.fixture
def engine(namespace: StoreSettings) -> Iterator[Engine]:
    """An engine on the test's own database."""
    built = make_engine(namespace, pool_size=4)
    yield built
    built.dispose()


@pytest.fixture
def redis_client(namespace: StoreSettings) -> Iterator[redis.Redis]:
    """A Redis client; keys must start with the test's namespace."""
    client = redis.Redis.from_url(namespace.redis_url)
    yield client
    client.close()
