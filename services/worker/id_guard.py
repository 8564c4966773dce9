"""One process per worker id: a worker does not start under the id of one that runs.

A second process under a running worker's id would overwrite its heartbeat, share its
queue and settle its runs as a dead predecessor's. A worker id is taken while its last
heartbeat (Redis, expiring after three intervals) says it runs and its queue has a
consumer, the broker's view of a live connection; a predecessor that died has neither
for long, so a restart under the same id goes ahead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pika.exceptions import ChannelClosedByBroker

from common.errors import WorkerIdInUseError
from common.keys import WORKER_INCARNATION
from common.states import WorkerState
from common.stores import Stores
from common.topology import worker_queue


@dataclass(frozen=True)
class LastHeartbeat:
    """What the last heartbeat of a worker id says of the process that sent it."""

    state: str
    sent_at: int
    hostname: str
    pid: str
    incarnation: str

    @classmethod
    def from_hash(cls, fields: Mapping[str, str]) -> LastHeartbeat | None:
        """The heartbeat as ``WorkerMarks.last_beat`` reads it; None when there is none
        (it expired)."""
        if not fields:
            return None

        def text(name: str) -> str:
            return fields.get(name, "")

        sent_at = text("last_heartbeat")
        return cls(
            state=text("state"),
            sent_at=int(sent_at) if sent_at.isdigit() else 0,
            hostname=text("hostname"),
            pid=text("pid"),
            incarnation=text(WORKER_INCARNATION),
        )


def taken_by(heartbeat: LastHeartbeat | None, consumers: int) -> LastHeartbeat | None:
    """The running process that holds the worker id, if one does: a heartbeat that has
    not said STOPPED, and a consumer on the worker's queue."""
    if heartbeat is None or consumers == 0:
        return None
    if heartbeat.state == str(WorkerState.STOPPED):
        return None
    return heartbeat


def refuse_if_running(stores: Stores, worker_id: str) -> None:
    """Raise ``WorkerIdInUseError`` when a live process runs under ``worker_id``; read
    only, so the running one is not disturbed."""
    heartbeat = LastHeartbeat.from_hash(stores.worker_marks().last_beat(worker_id))
    if heartbeat is None:
        return
    running = taken_by(heartbeat, _consumers(stores, worker_id))
    if running is not None:
        where = f"pid {running.pid} on {running.hostname}, incarnation {running.incarnation}"
        raise WorkerIdInUseError(worker_id, where, max(0, stores.clock.now_ms() - running.sent_at))


def _consumers(stores: Stores, worker_id: str) -> int:
    """How many consumers the worker's queue has (0 when it does not exist)."""
    connection = stores.connect_broker(f"kairos worker {worker_id} (start check)")
    try:
        channel = connection.channel()
        try:
            declared = channel.queue_declare(worker_queue(worker_id), passive=True)
        except ChannelClosedByBroker:
            return 0
        return int(declared.method.consumer_count)
    finally:
        if connection.is_open:
            connection.close()
