"""The workers aggregate: each worker's ``workers`` row (the durable copy of its last
heartbeat, and its state) and the executions QUEUED on it, read and written through
``WorkerStore`` alone.

``MySqlWorkerStore`` holds the SQL, on a connection whose transaction its caller holds;
``MySqlWorkerTransactions`` hands one out per connection of an engine. Their in-memory
twin is ``common.memory.workers.WorkerTables`` (part of ``MemoryStore``);
``tests/contracts/worker_store.py`` holds both to one contract. Who uses it: the
worker's heartbeat (upsert), the dispatcher's worker directory (reload), the rescue
(gone, draining, forget), retention (prune), the leader's gauges, the API's handler
check and the operators' views (``common.worker_views``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from common.db.engine import lock_waits_of
from common.db.retry import is_lock_conflict
from common.db.rows import AnyRow
from common.db.schema import executions, workers
from common.db.store_transactions import EngineStores, StoreTransactions
from common.states import ExecutionStatus, WorkerState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Heartbeat:
    """What a worker reports of itself every few seconds."""

    worker_id: str
    hostname: str
    pid: int
    capacity: int
    active: int
    cpu_idle: int
    avg_ms: int
    handlers: tuple[str, ...]
    state: WorkerState
    started_at: int
    sent_at: int
    overrun: int = 0
    """Runs past their timeout whose thread goes on; counted in ``active`` too."""
    handler_ms: Mapping[str, int] = field(default_factory=dict)
    """The run time of each handler it has timed, in ms (at least 1), weighted towards
    its latest runs: the leader bounds the worker's queue by what it holds of each."""

    def as_dict(self) -> dict[str, str | int]:
        """The fields as plain values, for Redis and JSON."""
        return {
            "worker_id": self.worker_id,
            "hostname": self.hostname,
            "pid": self.pid,
            "capacity": self.capacity,
            "active": self.active,
            "cpu_idle": self.cpu_idle,
            "avg_ms": self.avg_ms,
            "handlers": json.dumps(list(self.handlers)),
            "state": str(self.state),
            "started_at": self.started_at,
            "last_heartbeat": self.sent_at,
            "overrun": self.overrun,
            "handler_ms": json.dumps(dict(sorted(self.handler_ms.items()))),
        }


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A ``workers`` row: a worker's last heartbeat as stored, and its state (FORGOTTEN
    is the dispatcher's word, not the worker's)."""

    worker_id: str
    hostname: str
    pid: int
    capacity: int
    active: int
    cpu_idle: int
    avg_ms: int
    handlers: tuple[str, ...]
    state: WorkerState
    started_at: int
    last_heartbeat: int
    overrun: int
    handler_ms: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: AnyRow) -> WorkerRecord:
        """The worker a ``select(workers)`` row holds."""
        return cls(
            worker_id=row.worker_id,
            hostname=row.hostname,
            pid=row.pid,
            capacity=row.capacity,
            active=row.active,
            cpu_idle=row.cpu_idle,
            avg_ms=row.avg_ms,
            handlers=tuple(json.loads(row.handlers)),
            state=WorkerState(row.state),
            started_at=row.started_at,
            last_heartbeat=row.last_heartbeat,
            overrun=row.overrun,
            handler_ms=_handler_ms(row.handler_ms),
        )


def _handler_ms(text: str | None) -> dict[str, int]:
    """The stored run time per handler; none from a worker that does not report it."""
    if not text:
        return {}
    try:
        stored = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(stored, dict):
        return {}
    return {str(k): max(1, int(v)) for k, v in stored.items() if isinstance(v, int | float)}


class WorkerStore(Protocol):
    """The workers table, and the executions QUEUED on each worker: every read and write
    of them, on one connection (or the in-memory twin)."""

    def upsert_heartbeat(self, heartbeat: Heartbeat) -> None:
        """Insert or refresh the worker's row: what it says of itself, state included."""
        ...

    def fresh_workers(self, heard_since_ms: int) -> list[WorkerRecord]:
        """ACTIVE workers whose last heartbeat is no older than the cut-off."""
        ...

    def draining_workers(self, heard_since_ms: int) -> list[WorkerRecord]:
        """DRAINING workers whose last heartbeat is no older than the cut-off."""
        ...

    def gone_workers(self, heard_before_ms: int) -> list[WorkerRecord]:
        """Workers that said they stopped or were last heard before the cut-off, not
        forgotten; longest gone first."""
        ...

    def forget_worker_unless_held(self, worker_id: str, heard_before_ms: int) -> bool:
        """Mark a worker last heard before the cut-off, with nothing QUEUED on it,
        FORGOTTEN; False (nothing changed) if it spoke since, has work, or another
        transaction holds a row this needs. Its next heartbeat, should it come back,
        makes it what it says again."""
        ...

    def all_workers(self) -> list[WorkerRecord]:
        """Every worker row, by id, for listings."""
        ...

    def registered_handlers(self) -> set[str]:
        """Every handler name any worker has ever registered."""
        ...

    def queued_by_worker(self) -> dict[str, int]:
        """How many executions are QUEUED on each worker (in its queue or running)."""
        ...

    def prune_forgotten(self, before_ms: int, limit: int) -> list[str]:
        """Delete up to ``limit`` forgotten workers last heard before ``before_ms``; their
        ids. A worker that comes back after this registers afresh with its first
        heartbeat."""
        ...


# Where a stage gets its ``WorkerStore``: a plain read, or a transaction.
WorkerTransactions: TypeAlias = StoreTransactions[WorkerStore]


class MySqlWorkerStore:
    """``WorkerStore`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def _workers(self, query: sa.Select[*tuple[object, ...]]) -> list[WorkerRecord]:
        return [WorkerRecord.from_row(row) for row in self._conn.execute(query)]

    def upsert_heartbeat(self, heartbeat: Heartbeat) -> None:
        """Insert or refresh the worker's row."""
        values = heartbeat.as_dict()
        statement = mysql_insert(workers).values(**values)
        updates = {k: statement.inserted[k] for k in values if k != "worker_id"}
        self._conn.execute(statement.on_duplicate_key_update(**updates))

    def fresh_workers(self, heard_since_ms: int) -> list[WorkerRecord]:
        """ACTIVE workers whose last heartbeat is no older than the cut-off."""
        return self._heard_since(WorkerState.ACTIVE, heard_since_ms)

    def draining_workers(self, heard_since_ms: int) -> list[WorkerRecord]:
        """DRAINING workers whose last heartbeat is no older than the cut-off."""
        return self._heard_since(WorkerState.DRAINING, heard_since_ms)

    def _heard_since(self, state: WorkerState, heard_since_ms: int) -> list[WorkerRecord]:
        query = sa.select(workers).where(
            workers.c.state == state, workers.c.last_heartbeat >= heard_since_ms
        )
        return self._workers(query)

    def gone_workers(self, heard_before_ms: int) -> list[WorkerRecord]:
        """Workers that said they stopped, or whose last heartbeat is older than the
        cut-off; not those forgotten already."""
        return self._workers(
            sa.select(workers)
            .where(
                sa.or_(
                    workers.c.state == WorkerState.STOPPED,
                    workers.c.last_heartbeat < heard_before_ms,
                ),
                workers.c.state != WorkerState.FORGOTTEN,
            )
            # Longest gone first: a per-sweep limit of forgets reaches them in turn.
            .order_by(workers.c.last_heartbeat),
        )

    def forget_worker_unless_held(self, worker_id: str, heard_before_ms: int) -> bool:
        """Mark the worker FORGOTTEN (see ``WorkerStore``); False at once, and nothing
        changed, when a row it must lock or read with a lock is held by another
        transaction."""
        try:
            with lock_waits_of(self._conn, 0):
                return self._forget(worker_id, heard_before_ms)
        except OperationalError as e:
            if not is_lock_conflict(e):
                raise
            log.info("worker %s is held by another transaction; forgotten later", worker_id)
            return False

    def _forget(self, worker_id: str, heard_before_ms: int) -> bool:
        queued = (
            sa.select(executions.c.id)
            .where(
                executions.c.worker_id == worker_id,
                executions.c.status == ExecutionStatus.QUEUED,
            )
            .exists()
        )
        result = self._conn.execute(
            workers.update()
            .where(
                workers.c.worker_id == worker_id,
                workers.c.last_heartbeat < heard_before_ms,
                workers.c.state != WorkerState.FORGOTTEN,
                ~queued,
            )
            .values(state=WorkerState.FORGOTTEN)
        )
        return bool(result.rowcount)

    def all_workers(self) -> list[WorkerRecord]:
        """Every worker row, by id, for listings."""
        return self._workers(sa.select(workers).order_by(workers.c.worker_id))

    def registered_handlers(self) -> set[str]:
        """Every handler name any worker has ever registered."""
        names: set[str] = set()
        for (raw,) in self._conn.execute(sa.select(workers.c.handlers)).all():
            names.update(json.loads(raw))
        return names

    def queued_by_worker(self) -> dict[str, int]:
        """How many executions each worker has in its queue or running."""
        rows = self._conn.execute(
            sa.select(executions.c.worker_id, sa.func.count())
            .where(executions.c.status == ExecutionStatus.QUEUED)
            .group_by(executions.c.worker_id)
        ).all()
        return {str(worker): int(count) for worker, count in rows}

    def prune_forgotten(self, before_ms: int, limit: int) -> list[str]:
        """Delete up to ``limit`` forgotten workers last heard before ``before_ms``; their
        ids."""
        ids = list(
            self._conn.execute(
                sa.select(workers.c.worker_id)
                .where(
                    workers.c.state == WorkerState.FORGOTTEN,
                    workers.c.last_heartbeat < before_ms,
                )
                .limit(limit)
            ).scalars()
        )
        if ids:
            self._conn.execute(
                workers.delete().where(
                    workers.c.worker_id.in_(ids), workers.c.state == WorkerState.FORGOTTEN
                )
            )
        return [str(i) for i in ids]


class MySqlWorkerTransactions(EngineStores[WorkerStore]):
    """``WorkerTransactions`` on an engine: one ``MySqlWorkerStore`` per connection."""

    __slots__ = ()

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, MySqlWorkerStore)
