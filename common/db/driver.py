"""Statements on the dispatch hot path, written in the driver's own SQL.

SQLAlchemy Core builds, caches and binds a statement on every call: for an IN list or a
multi-row VALUES of hundreds of entries that is one bind parameter at a time, and the
rows that come back go through its result processing. On the dispatcher's busiest
statements (claim, fire, record results) that is a large share of its CPU. Here the
SQL is a fixed string with the driver's ``%s`` placeholders, filled by the driver in
one pass; the rows come back as named tuples, read by column name.

Only the statements that run per batch of jobs live here; everything else stays in
SQLAlchemy Core, where it is clearer.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Sequence
from functools import lru_cache
from operator import index
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.rows import AnyRow
from common.errors import ConfigurationError

_DRIVER_PARAMSTYLES = ("format", "pyformat")
_ID_STEP_KEY = "kairos_insert_id_step"


def marks(count: int) -> str:
    """``%s, %s, ...``: placeholders for an IN list of ``count`` values."""
    return ", ".join(["%s"] * count)


def ints(values: Iterable[int]) -> str:
    """``1, 2, 3``: integers written into the SQL text, for IN lists of keys.

    The driver escapes each parameter in Python; an integer needs no escaping, and
    ``operator.index`` refuses anything that is not one (a string, a float), so writing
    it as text is as safe and much cheaper. The dispatcher's batches carry thousands.
    """
    return ", ".join([str(index(v)) for v in values])


def int_or_null(value: int | None) -> str:
    """An integer or NULL as SQL text (see ``ints``)."""
    return "NULL" if value is None else str(index(value))


def _check(conn: Connection) -> None:
    if conn.dialect.paramstyle not in _DRIVER_PARAMSTYLES:
        raise ConfigurationError(
            f"the database driver {conn.dialect.driver!r} uses the "
            f"{conn.dialect.paramstyle!r} parameter style; Kairos needs a MySQL driver with "
            "%s placeholders: use a mysql+pymysql:// URL"
        )


def fetch(conn: Connection, sql: str, params: Sequence[Any] = ()) -> list[AnyRow]:
    """Run a SELECT written with ``%s`` placeholders; rows are read by column name.

    Each row is a named tuple of its columns: reading a column by name from a
    SQLAlchemy row takes about a microsecond, from a named tuple a few dozen
    nanoseconds, and the claim, fire and results paths read a dozen columns from each
    of thousands of rows a second.
    """
    _check(conn)
    result = conn.exec_driver_sql(sql, tuple(params))
    make = _row_type(tuple(result.keys()))._make
    return [make(row) for row in result.all()]


@lru_cache(maxsize=256)
def _row_type(columns: tuple[str, ...]) -> Any:
    """A named tuple type for one statement's columns (a name that is not an identifier,
    ``COUNT(*)`` say, is read by position)."""
    return namedtuple("FetchedRow", columns, rename=True)


def execute(conn: Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run an INSERT or UPDATE written with ``%s`` placeholders; returns the rows matched."""
    _check(conn)
    return int(conn.exec_driver_sql(sql, tuple(params)).rowcount)


def insert(conn: Connection, sql: str, params: Sequence[Any] = ()) -> int:
    """Run an INSERT written with ``%s`` placeholders; returns the id of its first row."""
    _check(conn)
    return int(conn.exec_driver_sql(sql, tuple(params)).lastrowid)


def consecutive_id_step(conn: Connection) -> int | None:
    """The id step of a multi-row INSERT when its ids are consecutive, else None.

    With ``innodb_autoinc_lock_mode`` 0 or 1 (1 is the MariaDB default) InnoDB reserves
    the ids of a "simple insert" (row count known up front) in one go under its AUTO-INC
    lock, so the rows get ``first, first + step, ...`` where ``first`` is the
    statement's LAST_INSERT_ID() and ``step`` is ``@@auto_increment_increment``. With
    mode 2 (interleaved, the MySQL 8 default) they may not be consecutive: None.

    Read once per database connection and kept with it: the lock mode changes only with
    a server restart (which means new connections) and a session's increment is copied
    from the global one when it connects. Asked per statement, the query showed in the
    API's CPU when single creates are stored in small groups (bench/RESULTS.md).
    """
    info = conn.connection.info
    if _ID_STEP_KEY not in info:
        lock_mode, increment = conn.execute(
            sa.text("SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment")
        ).one()
        info[_ID_STEP_KEY] = int(increment) if int(lock_mode) in (0, 1) else None
    step: int | None = info[_ID_STEP_KEY]
    return step
