"""Remembered answers of requests that carried an Idempotency-Key (batch creates,
manual triggers): one row per app, operation and key, until it expires.

A request takes its key by inserting the row before it does its work, in the same
transaction: a concurrent request with the same key waits on the unique key until the
first commits (then finds its answer) or rolls back (then does the work itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.schema import idempotency_keys as table

# Expired rows are deleted a few at a time by the requests that store new ones.
PURGE_BATCH = 100


@dataclass(frozen=True)
class KeyedRequest:
    """A request's idempotency key, its operation and a digest of what it asks for."""

    app_pk: int
    operation: str
    key: str
    request_hash: str


@dataclass(frozen=True)
class StoredAnswer:
    """The answer given to a keyed request: status, JSON body, Location."""

    status_code: int
    response: str
    location: str | None
    request_hash: str


def _this(request: KeyedRequest) -> sa.ColumnElement[bool]:
    return sa.and_(
        table.c.app_pk == request.app_pk,
        table.c.operation == request.operation,
        table.c.idempotency_key == request.key,
    )


def find_answer(conn: Connection, request: KeyedRequest, now_ms: int) -> StoredAnswer | None:
    """The answer stored for this app, operation and key, unless it expired."""
    row = conn.execute(
        sa.select(
            table.c.status_code, table.c.response, table.c.location, table.c.request_hash
        ).where(_this(request), table.c.expires_at > now_ms, table.c.status_code > 0)
    ).first()
    if row is None:
        return None
    return StoredAnswer(int(row.status_code), str(row.response), row.location, row.request_hash)


def take_key(conn: Connection, request: KeyedRequest, now_ms: int, expires_ms: int) -> None:
    """Insert the key's row, without an answer yet; raises IntegrityError when another
    request holds the key (after waiting for it to commit)."""
    conn.execute(table.delete().where(_this(request), table.c.expires_at <= now_ms))
    conn.execute(
        table.insert().values(
            app_pk=request.app_pk,
            operation=request.operation,
            idempotency_key=request.key,
            request_hash=request.request_hash,
            status_code=0,
            response="",
            created_at=now_ms,
            expires_at=expires_ms,
        )
    )


def store_answer(conn: Connection, request: KeyedRequest, answer: StoredAnswer) -> None:
    """Record the answer on the key's row taken by ``take_key`` in this transaction."""
    conn.execute(
        table.update()
        .where(_this(request))
        .values(status_code=answer.status_code, response=answer.response, location=answer.location)
    )


def purge_expired(conn: Connection, now_ms: int, limit: int = PURGE_BATCH) -> int:
    """Delete up to ``limit`` expired rows, oldest end first; how many went."""
    ids = list(
        conn.execute(
            sa.select(table.c.id)
            .where(table.c.expires_at <= now_ms)
            .order_by(table.c.expires_at)
            .limit(limit)
        ).scalars()
    )
    if ids:
        conn.execute(table.delete().where(table.c.id.in_(ids)))
    return len(ids)
