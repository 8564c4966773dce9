"""Statements on the dispatch hot path, written in the driver's own SQL.

SQLAlchemy Core builds, caches and binds a statement on every call: for an IN list or a
multi-row VALUES of hundreds of entries that is one bind parameter at a time, and the
rows that come back go through its result processing. On the dispatcher's busiest
statements (claim, fire, record results) that was about a quarter of its CPU. Here the
SQL is a fixed string with the driver's ``%s`` placeholders, filled by the driver in
one pass; the rows come back as SQLAlchemy rows, read by column name as before.

Only the statements that run per batch of jobs live here; everything else stays in
SQLAlchemy Core, where it is clearer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from common.db.rows import AnyRow
from common.errors import ConfigurationError

_DRIVER_PARAMSTYLES = ("format", "pyformat")


def marks(count: int) -> str:
    """``%s, %s, ...``: placeholders for an IN list of ``count`` values."""
    return ", ".join(["%s"] * count)


def row_marks(rows: int, columns: int) -> str:
    """``(%s, %s), (%s, %s), ...``: placeholders for a multi-row VALUES list."""
    return ", ".join(["(" + marks(columns) + ")"] * rows)


def _check(conn: Connection) -> None:
    if conn.dialect.paramstyle not in _DRIVER_PARAMSTYLES:
        raise ConfigurationError(
            f"the database driver {conn.dialect.driver!r} uses the "
            f"{conn.dialect.paramstyle!r} parameter style; Kairos needs a MySQL driver with "
            "%s placeholders: use a mysql+pymysql:// URL"
        )


def fetch(conn: Connection, sql: str, params: Sequence[Any] = ()) -> list[AnyRow]:
    """Run a SELECT written with ``%s`` placeholders; rows are read by column name."""
    _check(conn)
    return list(conn.exec_driver_sql(sql, tuple(params)).all())


def execute(conn: Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run an INSERT or UPDATE written with ``%s`` placeholders; returns the rows matched."""
    _check(conn)
    return int(conn.exec_driver_sql(sql, tuple(params)).rowcount)
