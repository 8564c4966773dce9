"""The store as sending executions sees it: the rows of what the broker did not route.

``DispatchStore`` is the port ``services.dispatcher.routing.dispatch`` writes through;
``MySqlDispatchStore`` passes the call to ``executions.unmark_queued`` on the caller's
connection, and ``common.memory.store.MemoryStore`` keeps the same contract in memory
(``tests/contracts/dispatch_store.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sqlalchemy.engine import Connection

from common.db import executions


class DispatchStore(Protocol):
    """What sending a pack of executions writes, inside the caller's transaction."""

    def unmark_queued(self, keys: Iterable[int]) -> None:
        """Put executions marked QUEUED back to SCHEDULED (their message did not land)."""
        ...


class MySqlDispatchStore:
    """``DispatchStore`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def unmark_queued(self, keys: Iterable[int]) -> None:
        """See ``executions.unmark_queued``."""
        executions.unmark_queued(self._conn, keys)
