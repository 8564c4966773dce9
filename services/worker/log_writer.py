"""Writing run logs to MySQL: one thread, one multi-row INSERT for every run that
logged since the last write, every ``interval`` seconds, and at once when a run ends.

A running run's lines show within about ``interval`` seconds (so a reader can follow
it); an ended run's last lines are written before its result is published, so a reader
who sees the execution ended sees its whole log. Runs that log nothing are never seen
here: a run joins the writer with its first line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from sqlalchemy.engine import Engine

from common.db.execution_logs import insert_lines
from services.worker.log_quota import RunLogQuota
from services.worker.run_logs import LogLine, RunLog

log = logging.getLogger(__name__)

FLUSH_INTERVAL_SECONDS = 1.0
# How long an ending run waits for its last lines to be written before it reports
# anyway: its outcome matters more than its log.
FINISH_WAIT_SECONDS = 5.0
# How long the lines of an ended run are tried again while MySQL refuses them.
GIVE_UP_SECONDS = 60.0

Store = Callable[[Sequence[LogLine]], None]


def mysql_store(engine: Engine) -> Store:
    """Store lines in ``execution_logs`` in one transaction."""

    def store(lines: Sequence[LogLine]) -> None:
        with engine.begin() as conn:
            insert_lines(conn, lines)

    return store


class RunLogWriter:
    """Hands out a ``RunLog`` per run and writes what the runs log, from a thread of
    its own."""

    def __init__(
        self,
        store: Store,
        max_bytes: int,
        interval: float = FLUSH_INTERVAL_SECONDS,
        quota: RunLogQuota | None = None,
    ) -> None:
        self._store = store
        self.max_bytes = max_bytes
        self._interval = interval
        self._quota = quota
        self._lock = threading.Lock()
        self._logging: dict[str, RunLog] = {}
        self._ended_at: dict[str, float] = {}
        self._written = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self, execution_id: str, app: int | None = None) -> RunLog | None:
        """A run's log (of ``app``'s job, whose run-log quota it counts against); None
        when capture is off (a bound of 0 bytes)."""
        if self.max_bytes <= 0:
            return None
        return RunLog(execution_id, self.max_bytes, self._joined, app)

    def finish(self, run_log: RunLog | None, wait: float = FINISH_WAIT_SECONDS) -> bool:
        """The run ended: close its log and wait (up to ``wait`` s) until every line of
        it is written; True if they were (or it had none)."""
        if run_log is None:
            return True
        run_log.close()
        if not run_log.lines:
            return True  # it never logged: the writer never saw it
        with self._lock:
            if run_log.execution_id not in self._logging:
                return True  # it never logged
            self._ended_at[run_log.execution_id] = time.monotonic()
        self._wake.set()
        deadline = time.monotonic() + wait
        with self._lock:
            while run_log.execution_id in self._logging:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._written.wait(left)
        return True

    def start(self) -> None:
        """Write in the background until ``stop``."""
        self._thread = threading.Thread(target=self._run, name="run-log-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is left, then end the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=FINISH_WAIT_SECONDS + 5)
            self._thread = None

    def write_once(self) -> int:
        """Write every line logged since the last write, in one statement; how many.

        Lines past their app's run-log quota are dropped first (``RunLogQuota``).
        Lines that MySQL refused go back to their runs to be tried next time."""
        with self._lock:
            logs = list(self._logging.values())
        taken = [(r, r.take()) for r in logs]
        if self._quota is not None:
            taken = self._quota.admit(taken)
        lines = [line for _, batch in taken for line in batch]
        if lines:
            try:
                self._store(lines)
            except Exception as e:
                log.warning("could not write %d run log lines (%r); trying again", len(lines), e)
                for run_log, batch in taken:
                    # Counted once: a quota does not count them again when retried.
                    run_log.give_back([replace(x, admitted=True) for x in batch])
                self._give_up_stale()
                return 0
        self._forget_drained(logs)
        return len(lines)

    def _joined(self, run_log: RunLog) -> None:
        with self._lock:
            self._logging[run_log.execution_id] = run_log

    def _forget_drained(self, logs: list[RunLog]) -> None:
        with self._lock:
            for run_log in logs:
                if run_log.drained:
                    self._logging.pop(run_log.execution_id, None)
                    self._ended_at.pop(run_log.execution_id, None)
            self._written.notify_all()

    def _give_up_stale(self) -> None:
        """Drop the lines of runs that ended long ago and still cannot be written, so a
        long MySQL outage holds no more than the runs of its last minute."""
        cutoff = time.monotonic() - GIVE_UP_SECONDS
        with self._lock:
            stale = [e for e, ended in self._ended_at.items() if ended < cutoff]
            for execution_id in stale:
                run_log = self._logging.pop(execution_id)
                self._ended_at.pop(execution_id)
                dropped = len(run_log.take())
                log.error(
                    "dropped %d run log lines that could not be written for %.0f s",
                    dropped,
                    GIVE_UP_SECONDS,
                    extra={"execution_id": execution_id},
                )
            if stale:
                self._written.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.write_once()
            except Exception:  # the writer must outlive any one failure
                log.exception("run log writer failed; going on")
        self.write_once()
