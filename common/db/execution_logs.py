"""Run log lines in MySQL: written in batches by workers, paged by the API, deleted
with their executions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.schema import execution_logs


class LineToStore(Protocol):
    """What a line needs to be stored (``services.worker.run_logs.LogLine``)."""

    @property
    def execution_id(self) -> str: ...

    @property
    def seq(self) -> int: ...

    @property
    def at(self) -> int: ...

    @property
    def level(self) -> str: ...

    @property
    def line(self) -> str: ...


@dataclass(frozen=True)
class StoredLine:
    """One stored line of a run's log."""

    seq: int
    at: int
    level: str
    line: str


def insert_lines(conn: Connection, lines: Sequence[LineToStore]) -> None:
    """Store ``lines`` in one statement; a line stored before (same execution and seq,
    written again after a lost answer) is left as it is."""
    if not lines:
        return
    rows = [
        {"execution_id": x.execution_id, "seq": x.seq, "at": x.at, "level": x.level, "line": x.line}
        for x in lines
    ]
    conn.execute(execution_logs.insert().prefix_with("IGNORE"), rows)


def page_lines(conn: Connection, execution_id: str, after: int, limit: int) -> list[StoredLine]:
    """Up to ``limit`` lines of the execution's log with seq past ``after``, in order."""
    c = execution_logs.c
    query = (
        sa.select(c.seq, c.at, c.level, c.line)
        .where(c.execution_id == execution_id, c.seq > after)
        .order_by(c.seq)
        .limit(limit)
    )
    return [
        StoredLine(int(r.seq), int(r.at), str(r.level), str(r.line)) for r in conn.execute(query)
    ]


def delete_for_executions(conn: Connection, execution_ids: Sequence[str]) -> int:
    """Delete every line of these executions' logs; how many went."""
    if not execution_ids:
        return 0
    gone = conn.execute(
        execution_logs.delete().where(execution_logs.c.execution_id.in_(sorted(execution_ids)))
    )
    return int(gone.rowcount)
