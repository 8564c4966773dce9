"""Build the SQLAlchemy engine for a namespace, create its database, run migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from common.config import StoreSettings
from common.errors import (
    ConfigurationError,
    KairosError,
    StoreAccessDeniedError,
    StoreUnavailableError,
)

_MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
# No MySQL call waits for ever: a half-open connection (a server gone without a reset)
# fails its statement after the read timeout (``database_read_timeout_seconds``)
# instead of holding its thread for hours. Migrations (one long ALTER on a big table)
# get this much instead.
MIGRATION_READ_TIMEOUT_SECONDS = 3600
CONNECT_TIMEOUT_SECONDS = 10
WRITE_TIMEOUT_SECONDS = 60


def server_url(settings: StoreSettings) -> sa.URL:
    """The MySQL server URL from settings, without a database."""
    return make_url(settings.database_url).set(database=None)


def database_url(settings: StoreSettings) -> sa.URL:
    """The URL of the namespace's own database."""
    return server_url(settings).set(database=settings.namespace)


def session_limits(settings: StoreSettings) -> str:
    """The statement every connection runs first: how long it waits for a lock another
    transaction holds, and (MariaDB's ``idle_transaction_timeout``) how long the server
    keeps a transaction this session leaves open and idle.

    Both bound what a paused or cut-off process costs the others: its open transaction
    is rolled back after the idle limit, and nobody waits on its locks longer than the
    lock limit meanwhile (a statement that gives up is tried again or passed over).
    """
    lock_wait = int(settings.database_lock_wait_seconds)
    return (
        f"SET SESSION innodb_lock_wait_timeout = {lock_wait}, "
        f"lock_wait_timeout = {lock_wait}, "
        f"idle_transaction_timeout = {int(settings.database_idle_transaction_seconds)}"
    )


def connect_args(settings: StoreSettings) -> dict[str, object]:
    """PyMySQL's connection arguments: every wait bounded, the session limits set."""
    return {
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "read_timeout": settings.database_read_timeout_seconds,
        "write_timeout": WRITE_TIMEOUT_SECONDS,
        "init_command": session_limits(settings),
    }


def make_engine(settings: StoreSettings, pool_size: int = 5, pre_ping: bool = True) -> Engine:
    """An engine on the namespace's database, its sessions limited (``connect_args``).

    With ``pre_ping`` a pooled connection is pinged before each use (a round trip per
    transaction), so a database restart costs no failed statement. Without it the first
    statement on a dead connection fails, and the whole pool is dropped at once: for
    code that retries anyway.
    """
    return sa.create_engine(
        database_url(settings),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=pre_ping,
        pool_recycle=3600,
        isolation_level="READ COMMITTED",
        # Errors carry the statement but not its parameters: those are job params,
        # results and callback payloads, which logs must not hold.
        hide_parameters=True,
        connect_args=connect_args(settings),
    )


def ensure_database(settings: StoreSettings) -> None:
    """Create the namespace's database when it does not exist yet."""
    engine = sa.create_engine(server_url(settings), poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(
                sa.text(
                    f"CREATE DATABASE IF NOT EXISTS `{settings.namespace}` "
                    "CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
                )
            )
    except OperationalError as e:
        raise _store_error(e, settings.database_url) from e
    finally:
        engine.dispose()


_ACCESS_DENIED = (1044, 1045)


def _store_error(error: OperationalError, url: str) -> KairosError:
    """What a MySQL error means to an operator: access refused, or no answer."""
    code = error.orig.args[0] if error.orig is not None and error.orig.args else None
    if code in _ACCESS_DENIED:
        return StoreAccessDeniedError("MySQL", url, str(error.orig))
    return StoreUnavailableError("MySQL", url, str(error.orig))


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` with Alembic, on a connection of its own with the
    server's own lock waits and a long read timeout (an ALTER of a big table is slow,
    and waits for the services' statements to let go of the table)."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    own = sa.create_engine(
        engine.url,
        poolclass=sa.NullPool,
        isolation_level="READ COMMITTED",
        hide_parameters=True,
        connect_args={
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "read_timeout": MIGRATION_READ_TIMEOUT_SECONDS,
            "write_timeout": WRITE_TIMEOUT_SECONDS,
        },
    )
    try:
        with own.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        own.dispose()


def current_revision(engine: Engine) -> str | None:
    """The schema revision the database is at, or None when it was never migrated."""
    try:
        with engine.connect() as conn:
            value = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    except OperationalError as e:
        code = e.orig.args[0] if e.orig is not None and e.orig.args else None
        if code in (1049, 1146):  # unknown database, unknown table
            return None
        raise _store_error(e, str(engine.url)) from e
    return str(value) if value is not None else None


def require_schema(engine: Engine, namespace: str) -> None:
    """Refuse to start a service on a database that is not migrated to head."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    found = current_revision(engine)
    if found != head:
        raise ConfigurationError(
            f"namespace {namespace!r} has schema revision {found or 'none'}, this Kairos "
            f"needs {head}; run `kairos migrate` (with the same KAIROS_NAMESPACE) first"
        )


@contextmanager
def lock_waits_of(conn: Connection, seconds: int) -> Iterator[None]:
    """Within the block, a statement on ``conn`` waits at most ``seconds`` for a row lock
    another transaction holds (0: it fails at once); the session's own limit is put
    back after it, so the pooled connection keeps the limit it was made with."""
    previous = int(conn.exec_driver_sql("SELECT @@SESSION.innodb_lock_wait_timeout").scalar_one())
    conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {int(seconds)}")
    try:
        yield
    finally:
        try:
            conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {previous}")
        except DBAPIError:
            # A connection that cannot be told is not given to anyone else.
            conn.invalidate()
