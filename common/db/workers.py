"""Workers: the durable copy of each worker's heartbeat, read by the dispatcher and API."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from common.db.engine import lock_waits_of
from common.db.retry import is_lock_conflict
from common.db.rows import AnyRow
from common.db.schema import executions, workers
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


def _workers(conn: Connection, query: sa.Select[*tuple[object, ...]]) -> list[WorkerRecord]:
    return [WorkerRecord.from_row(row) for row in conn.execute(query)]


def upsert_heartbeat(conn: Connection, heartbeat: Heartbeat) -> None:
    """Insert or refresh the worker's row."""
    values = heartbeat.as_dict()
    statement = mysql_insert(workers).values(**values)
    updates = {k: statement.inserted[k] for k in values if k != "worker_id"}
    conn.execute(statement.on_duplicate_key_update(**updates))


def fresh_workers(conn: Connection, heard_since_ms: int) -> list[WorkerRecord]:
    """ACTIVE workers whose last heartbeat is no older than the cut-off."""
    return _heard_since(conn, WorkerState.ACTIVE, heard_since_ms)


def draining_workers(conn: Connection, heard_since_ms: int) -> list[WorkerRecord]:
    """DRAINING workers whose last heartbeat is no older than the cut-off."""
    return _heard_since(conn, WorkerState.DRAINING, heard_since_ms)


def _heard_since(conn: Connection, state: WorkerState, heard_since_ms: int) -> list[WorkerRecord]:
    query = sa.select(workers).where(
        workers.c.state == state, workers.c.last_heartbeat >= heard_since_ms
    )
    return _workers(conn, query)


def gone_workers(conn: Connection, heard_before_ms: int) -> list[WorkerRecord]:
    """Workers that said they stopped, or whose last heartbeat is older than the cut-off;
    not those forgotten already."""
    return _workers(
        conn,
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


def forget_worker(conn: Connection, worker_id: str, heard_before_ms: int) -> bool:
    """Mark a worker FORGOTTEN if it was last heard before the cut-off and has nothing
    QUEUED on it; False if it spoke since or still has work. Its next heartbeat, should
    it come back, makes it what it says again."""
    queued = (
        sa.select(executions.c.id)
        .where(
            executions.c.worker_id == worker_id,
            executions.c.status == ExecutionStatus.QUEUED,
        )
        .exists()
    )
    result = conn.execute(
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


def forget_worker_unless_held(conn: Connection, worker_id: str, heard_before_ms: int) -> bool:
    """``forget_worker``, False at once (and nothing changed) when a row it must lock or
    read with a lock is held by another transaction."""
    try:
        with lock_waits_of(conn, 0):
            return forget_worker(conn, worker_id, heard_before_ms)
    except OperationalError as e:
        if not is_lock_conflict(e):
            raise
        log.info("worker %s is held by another transaction; forgotten later", worker_id)
        return False


def all_workers(conn: Connection) -> list[WorkerRecord]:
    """Every worker row, by id, for listings."""
    return _workers(conn, sa.select(workers).order_by(workers.c.worker_id))


def registered_handlers(conn: Connection) -> set[str]:
    """Every handler name any worker has ever registered."""
    names: set[str] = set()
    for (raw,) in conn.execute(sa.select(workers.c.handlers)).all():
        names.update(json.loads(raw))
    return names
