"""Single creates stored together: one INSERT and one commit for the jobs waiting at once."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

from common.db.jobs import NewJob, insert_jobs

log = logging.getLogger(__name__)

MAX_GROUP = 500

Announce = Callable[[Sequence[NewJob], Sequence[int], int], None]


@dataclass(frozen=True)
class _Pending:
    job: NewJob
    now_ms: int
    stored: Future[int] = field(default_factory=Future)


class GroupInserter:
    """Inserts the jobs of concurrent single creates in shared transactions.

    A caller blocks until the transaction holding its job has committed, so an answer
    still means "stored". While one group commits the next one gathers, so under load
    the statement, the commit and their round trips are paid once per group instead of
    once per request; a request that finds no other waits for nothing extra. Jobs with
    a clientRequestId do not come here: their unique key could fail a whole group.
    """

    def __init__(self, engine: Engine, announce: Announce, max_group: int = MAX_GROUP) -> None:
        self._engine = engine
        self._announce = announce
        self._max_group = max_group
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: NewJob, now_ms: int) -> Future[int]:
        """Queue ``job``; the future gets its id once its transaction committed.

        Or the error storing its group raised (the database is down, say): then
        nothing of the group was written.
        """
        self._ensure_started()
        pending = _Pending(job, now_ms)
        self._queue.put(pending)
        return pending.stored

    def insert(self, job: NewJob, now_ms: int) -> int:
        """Store ``job`` as WAITING and return its id, blocking until committed."""
        return self.submit(job, now_ms).result()

    def stop(self) -> None:
        """Store what is queued, then end the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=10)

    def _ensure_started(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="group-insert", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < self._max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                group.append(item)
            self._store(group)

    def _store(self, group: Sequence[_Pending]) -> None:
        now_ms = max(p.now_ms for p in group)
        new_jobs = [p.job for p in group]
        try:
            with self._engine.begin() as conn:
                ids = insert_jobs(conn, new_jobs, now_ms)
        except Exception as e:
            for pending in group:
                pending.stored.set_exception(e)
            return
        for pending, job_id in zip(group, ids, strict=True):
            pending.stored.set_result(job_id)
        try:
            self._announce(new_jobs, ids, now_ms)
        except Exception:
            log.exception("could not announce %d stored jobs", len(ids))
