"""The store as the rescue and the recall see it: what is QUEUED on a worker, and moving it.

``RescueStore`` is the port ``services.dispatcher.upkeep.rescue`` reads and writes the
executions through (the workers themselves it reads through ``WorkerStore``);
``MySqlRescueStore`` passes each call to the repository function of the same name on
the caller's connection (no query of its own), and ``common.memory.store.MemoryStore``
keeps the same contract in memory (``tests/contracts/rescue_store.py``).
``RescueTransactions`` is where the rescue gets one: ``MySqlRescueTransactions`` on an
engine, ``MemoryStore`` itself in unit tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeAlias

from sqlalchemy.engine import Connection, Engine

from common.db import executions, executions_with_job, worker_moves
from common.db.dispatch_store import DispatchStore
from common.db.executions_with_job import ExecutionWithJob
from common.db.store_transactions import EngineStores, StoreTransactions


class RescueStore(DispatchStore, Protocol):
    """What the rescue reads of the executions QUEUED on a worker, and the moves it
    writes; what sending the moved executions puts back (``DispatchStore``)."""

    def unfinished_on_worker(self, worker_id: str, limit: int) -> list[ExecutionWithJob]:
        """Up to ``limit`` executions QUEUED on the worker, with their job's data."""
        ...

    def lock_queued_on(self, execution_ids: Iterable[str], worker_id: str) -> set[str]:
        """Lock those of these executions still QUEUED on the worker, passing over those
        another transaction holds; their ids."""
        ...

    def reassign(self, execution_id: str, from_worker: str, to_worker: str, now_ms: int) -> bool:
        """Move a QUEUED execution to another worker, dispatched now; False if it is no
        longer QUEUED on ``from_worker``."""
        ...

    def unassign(self, execution_id: str, from_worker: str, message: str, now_ms: int) -> bool:
        """Give a QUEUED execution back to the firer (SCHEDULED, due now, with why);
        False if it is no longer QUEUED on ``from_worker``."""
        ...

    def newest_queued_on(self, worker_id: str, limit: int) -> list[ExecutionWithJob]:
        """Up to ``limit`` executions QUEUED on the worker, the last sent first."""
        ...

    def recall(self, execution_ids: Sequence[str], from_worker: str, message: str) -> int:
        """Give executions QUEUED on a live worker back to the firer (SCHEDULED, due
        time and ``dispatched_at`` kept, with why); how many were still QUEUED there."""
        ...


# Where the rescue gets its ``RescueStore``: a plain read, or a transaction.
RescueTransactions: TypeAlias = StoreTransactions[RescueStore]


class MySqlRescueStore:
    """``RescueStore`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def unfinished_on_worker(self, worker_id: str, limit: int) -> list[ExecutionWithJob]:
        """See ``executions_with_job.unfinished_on_worker``."""
        return executions_with_job.unfinished_on_worker(self._conn, worker_id, limit)

    def lock_queued_on(self, execution_ids: Iterable[str], worker_id: str) -> set[str]:
        """See ``worker_moves.lock_queued_on``."""
        return worker_moves.lock_queued_on(self._conn, execution_ids, worker_id)

    def reassign(self, execution_id: str, from_worker: str, to_worker: str, now_ms: int) -> bool:
        """See ``worker_moves.reassign``."""
        return worker_moves.reassign(self._conn, execution_id, from_worker, to_worker, now_ms)

    def unassign(self, execution_id: str, from_worker: str, message: str, now_ms: int) -> bool:
        """See ``worker_moves.unassign``."""
        return worker_moves.unassign(self._conn, execution_id, from_worker, message, now_ms)

    def newest_queued_on(self, worker_id: str, limit: int) -> list[ExecutionWithJob]:
        """See ``executions_with_job.newest_queued_on``."""
        return executions_with_job.newest_queued_on(self._conn, worker_id, limit)

    def recall(self, execution_ids: Sequence[str], from_worker: str, message: str) -> int:
        """See ``worker_moves.recall``."""
        return worker_moves.recall(self._conn, execution_ids, from_worker, message)

    def unmark_queued(self, keys: Iterable[int]) -> None:
        """See ``executions.unmark_queued``."""
        executions.unmark_queued(self._conn, keys)


class MySqlRescueTransactions(EngineStores[RescueStore]):
    """``RescueTransactions`` on an engine: one ``MySqlRescueStore`` per connection."""

    __slots__ = ()

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, MySqlRescueStore)
