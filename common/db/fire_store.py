"""The store as firing sees it: what is due, and the writes that settle a due batch.

``FireStore`` is the port ``services.dispatcher.trigger.fire`` reads and writes through
inside its transaction; ``MySqlFireStore`` passes each call to the repository function
of the same name on the caller's connection (no query of its own), and
``common.memory.store.MemoryStore`` keeps the same contract in memory
(``tests/contracts/fire_store.py``). ``FireTransactions`` is where the firer gets one:
``MySqlFireTransactions`` on an engine, ``MemoryStore`` itself in unit tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeAlias

from sqlalchemy.engine import Connection, Engine

from common.db import executions, executions_with_job, job_dependencies, jobs
from common.db.apps import AppPolicy, MySqlAppStore
from common.db.dependency_store import DependencyStore, MySqlDependencyStore
from common.db.dispatch_store import DispatchStore
from common.db.engine import lock_waits_of
from common.db.executions_with_job import ExecutionWithJob
from common.db.store_transactions import EngineStores, StoreTransactions
from common.fair_share import AGING_MS
from common.states import ExecutionStatus, JobStatus


class FireStore(DispatchStore, DependencyStore, Protocol):
    """What firing a batch of due executions reads and writes, and what sending it puts
    back (``DispatchStore``)."""

    def scheduled_until(
        self, until_ms: int, per_app: int, aging_ms: int = AGING_MS
    ) -> list[ExecutionWithJob]:
        """SCHEDULED executions due by ``until_ms``, with their job's data: each app's
        first ``per_app`` in its order (``fair_share.place``), soonest first."""
        ...

    def app_policies(self) -> dict[int, AppPolicy]:
        """Every app's weight, cap and fences, by primary key."""
        ...

    def running_by_app(self) -> dict[int, int]:
        """How many runs each app has QUEUED (in a worker's queue or running)."""
        ...

    def mark_waiting(self, keys: Sequence[int]) -> None:
        """Say on these SCHEDULED executions that they wait for a free slot (``SLOT_WAIT``)."""
        ...

    def lock_still_scheduled(self, keys: Iterable[int], skip_locked: bool = False) -> set[int]:
        """Lock these executions; the keys of those still SCHEDULED (with ``skip_locked``,
        those another transaction holds are passed over)."""
        ...

    def jobs_with_runs(self, job_ids: Iterable[int]) -> set[int]:
        """Which of these jobs have an execution QUEUED (in a worker queue or running)."""
        ...

    def jobs_with_own_runs(self, job_ids: Iterable[int]) -> set[int]:
        """Which of these jobs have a scheduled (not manual) trigger not ended yet."""
        ...

    def lock_free_jobs(self, job_ids: Iterable[int]) -> set[int]:
        """Lock these jobs' rows, passing over those another transaction holds; the ids
        of those locked."""
        ...

    def mark_skipped(
        self,
        reasons: Mapping[int, str],
        now_ms: int,
        status: ExecutionStatus = ExecutionStatus.SKIPPED,
    ) -> None:
        """End executions without running them (SKIPPED or CANCELLED), with reasons."""
        ...

    def release_jobs(self, ends: Iterable[tuple[int, JobStatus | None]], now_ms: int) -> None:
        """Move the jobs of ended triggers on (job id, final status or None: recurring)."""
        ...

    def hold_scheduled(self, reasons: Mapping[int, str], until_ms: int) -> None:
        """Leave executions SCHEDULED until ``until_ms``, each with why in its message."""
        ...

    def mark_queued(self, workers: Mapping[int, str], now_ms: int) -> None:
        """Mark executions (key -> worker id) QUEUED; only those still SCHEDULED change."""
        ...

    def wake_children(self, parent_job_ids: Sequence[int], now_ms: int) -> int:
        """Bring forward to ``now_ms`` the runs of these jobs' children held for their
        parents, waiting for no row lock (a held child row fails the call); how many."""
        ...


# Where the firer gets its ``FireStore``: a plain read, or a transaction.
FireTransactions: TypeAlias = StoreTransactions[FireStore]


class MySqlFireStore(MySqlDependencyStore):
    """``FireStore`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def scheduled_until(
        self, until_ms: int, per_app: int, aging_ms: int = AGING_MS
    ) -> list[ExecutionWithJob]:
        """See ``executions_with_job.scheduled_until``."""
        return executions_with_job.scheduled_until(self._conn, until_ms, per_app, aging_ms)

    def app_policies(self) -> dict[int, AppPolicy]:
        """See ``AppStore.app_policies`` (the apps aggregate's SQL)."""
        return MySqlAppStore(self._conn).app_policies()

    def running_by_app(self) -> dict[int, int]:
        """See ``AppStore.running_by_app`` (the apps aggregate's SQL)."""
        return MySqlAppStore(self._conn).running_by_app()

    def mark_waiting(self, keys: Sequence[int]) -> None:
        """See ``executions_with_job.mark_waiting``."""
        executions_with_job.mark_waiting(self._conn, keys)

    def lock_still_scheduled(self, keys: Iterable[int], skip_locked: bool = False) -> set[int]:
        """See ``executions.lock_still_scheduled``."""
        return executions.lock_still_scheduled(self._conn, keys, skip_locked)

    def jobs_with_runs(self, job_ids: Iterable[int]) -> set[int]:
        """See ``executions.jobs_with_runs``."""
        return executions.jobs_with_runs(self._conn, job_ids)

    def lock_free_jobs(self, job_ids: Iterable[int]) -> set[int]:
        """See ``jobs.lock_free_jobs``."""
        return jobs.lock_free_jobs(self._conn, job_ids)

    def mark_skipped(
        self,
        reasons: Mapping[int, str],
        now_ms: int,
        status: ExecutionStatus = ExecutionStatus.SKIPPED,
    ) -> None:
        """See ``executions.mark_skipped``."""
        executions.mark_skipped(self._conn, reasons, now_ms, status)

    def jobs_with_own_runs(self, job_ids: Iterable[int]) -> set[int]:
        """See ``executions.jobs_with_own_runs``."""
        return executions.jobs_with_own_runs(self._conn, job_ids)

    def release_jobs(self, ends: Iterable[tuple[int, JobStatus | None]], now_ms: int) -> None:
        """See ``jobs.release_jobs``."""
        jobs.release_jobs(self._conn, ends, now_ms)

    def hold_scheduled(self, reasons: Mapping[int, str], until_ms: int) -> None:
        """See ``executions.hold_scheduled``."""
        executions.hold_scheduled(self._conn, reasons, until_ms)

    def mark_queued(self, workers: Mapping[int, str], now_ms: int) -> None:
        """See ``executions.mark_queued``."""
        executions.mark_queued(self._conn, workers, now_ms)

    def unmark_queued(self, keys: Iterable[int]) -> None:
        """See ``executions.unmark_queued``."""
        executions.unmark_queued(self._conn, keys)

    def wake_children(self, parent_job_ids: Sequence[int], now_ms: int) -> int:
        """See ``job_dependencies.wake_children``; a child row another transaction
        holds (the firer's own next pass, judging it) is not waited for."""
        with lock_waits_of(self._conn, 0):
            return job_dependencies.wake_children(self._conn, parent_job_ids, now_ms)


class MySqlFireTransactions(EngineStores[FireStore]):
    """``FireTransactions`` on an engine: one ``MySqlFireStore`` per connection."""

    __slots__ = ()

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, MySqlFireStore)
