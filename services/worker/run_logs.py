"""Each run's own log: the lines its handler writes (``ctx.log`` and standard
``logging``), bounded in size, waiting to be written to ``execution_logs``.

Runs share the worker's threads, so lines are routed by the run that is current in the
thread that logs, held in a context variable (``bind_run_log``), never by a handler of
the run's own on a shared logger: one run's lines can then never land in another's log.
A handler that logs nothing costs one context variable set and reset per run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass

from common.jsontext import clip_utf8

# A line that does not fit is clipped to the room left, unless that is less than this:
# a stub of a few bytes tells nothing.
MIN_CLIPPED_BYTES = 16


@dataclass(frozen=True)
class LogLine:
    """One line of a run's log: its place in the run (``seq`` from 1), when (epoch ms),
    its level name and its text; ``admitted`` once its app's run-log quota counted it
    (a line written again after a failed write is not counted twice); ``size``, its
    text's bytes in UTF-8 when known (0: not counted yet)."""

    execution_id: str
    seq: int
    at: int
    level: str
    line: str
    admitted: bool = False
    size: int = 0


class RunLog:
    """The lines of one run, up to ``max_bytes`` of text; safe to append to from any
    thread. Past the bound, lines are counted, not kept; ``close`` adds the line that
    says how much was dropped. Once its app's run-log quota cuts it (``cut``), it keeps
    no more lines: the quota's own mark says why."""

    def __init__(
        self,
        execution_id: str,
        max_bytes: int,
        on_first_line: Callable[[RunLog], None] | None = None,
        app: int | None = None,
    ) -> None:
        self.execution_id = execution_id
        self.app = app
        self._max_bytes = max_bytes
        self._on_first_line = on_first_line
        self._lock = threading.Lock()
        self._pending: list[LogLine] = []
        self._seq = 0
        self._kept_bytes = 0
        self._dropped_lines = 0
        self._dropped_bytes = 0
        self._cut = False
        self.closed = False

    def append(self, level: str, text: str, at_ms: int | None = None) -> None:
        """Keep one line (clipped to what the bound leaves), or count it as dropped."""
        at = at_ms if at_ms is not None else int(time.time() * 1000)
        first = False
        with self._lock:
            if self.closed:
                return
            size = len(text.encode("utf-8", "replace"))
            room = self._max_bytes - self._kept_bytes
            if self._dropped_lines or self._cut or (size > room and room < MIN_CLIPPED_BYTES):
                self._dropped_lines += 1
                self._dropped_bytes += size
                return
            if size > room:
                text = clip_utf8(text, room)
                kept = len(text.encode("utf-8", "replace"))
                self._dropped_bytes += size - kept
                self._dropped_lines += 1  # the rest of this line
                size = kept
            self._kept_bytes += size
            self._seq += 1
            first = self._seq == 1
            line = LogLine(self.execution_id, self._seq, at, level, text, size=size)
            self._pending.append(line)
        if first and self._on_first_line is not None:
            self._on_first_line(self)

    def close(self) -> None:
        """No more lines; if the bound dropped some, a last line says how many."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._dropped_lines and not self._cut:
                self._seq += 1
                note = (
                    f"[kairos] log truncated: {self._dropped_bytes} bytes in "
                    f"{self._dropped_lines} lines dropped past the run log bound of "
                    f"{self._max_bytes} bytes (KAIROS_RUN_LOG_MAX_BYTES)"
                )
                at = int(time.time() * 1000)
                self._pending.append(LogLine(self.execution_id, self._seq, at, "WARNING", note))

    def take(self) -> list[LogLine]:
        """The lines not taken yet, oldest first; they are the caller's to write."""
        with self._lock:
            lines, self._pending = self._pending, []
        return lines

    def cut(self) -> None:
        """Keep no more lines: its app's run-log quota is spent (the lines not taken
        yet go too; the quota's mark, written in place of the first dropped line, is
        the run's last)."""
        with self._lock:
            self._cut = True
            self._pending = []

    def give_back(self, lines: list[LogLine]) -> None:
        """Lines ``take`` returned that could not be written: they go first next time."""
        with self._lock:
            self._pending[:0] = lines

    @property
    def lines(self) -> int:
        """How many lines the run has kept so far (the truncation note included)."""
        return self._seq

    @property
    def drained(self) -> bool:
        """Closed with every line taken."""
        with self._lock:
            return self.closed and not self._pending


_CURRENT: ContextVar[RunLog | None] = ContextVar("kairos_run_log", default=None)


def bind_run_log(run_log: RunLog | None) -> Token[RunLog | None]:
    """Route the log lines written in this context (this thread, and the coroutines it
    runs) to ``run_log`` until ``release_run_log`` with the token; None routes nothing.
    A token rather than a context manager: this runs for every run, logging or not."""
    return _CURRENT.set(run_log)


def release_run_log(token: Token[RunLog | None]) -> None:
    """The run's handler returned: its lines no longer go to it."""
    _CURRENT.reset(token)


def current_run_log() -> RunLog | None:
    """The run whose handler is running in this context, if any."""
    return _CURRENT.get()


class RunLogCapture(logging.Handler):
    """A root-logger handler that copies each record written inside a run to that run's
    log; records written outside any run pass by untouched."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def handle(self, record: logging.LogRecord) -> bool:
        """Emit without the handler's lock: every record the process writes passes here,
        and those of runs on other threads must not wait for each other (each run's log
        has a lock of its own)."""
        if _CURRENT.get() is None:
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        """Append the record's text (with its traceback, if any) to the current run."""
        run_log = _CURRENT.get()
        if run_log is None:
            return
        try:
            text = self.format(record)
        except Exception:  # a handler's bad format string must not fail its run
            text = f"{record.name}: {record.msg!r} (its arguments could not be formatted)"
        run_log.append(record.levelname, text, int(record.created * 1000))


def install_capture(root: logging.Logger | None = None) -> RunLogCapture:
    """Install one ``RunLogCapture`` on the root logger (again: the one already there)."""
    root = root or logging.getLogger()
    for existing in root.handlers:
        if isinstance(existing, RunLogCapture):
            return existing
    capture = RunLogCapture()
    root.addHandler(capture)
    return capture


def level_name(level: int | str) -> str:
    """A level given as a number or a name, as its name (INFO for one not known)."""
    if isinstance(level, int):
        return logging.getLevelName(level) if level in _LEVELS else "INFO"
    name = level.upper()
    return name if name in _LEVEL_NAMES else "INFO"


_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
_LEVEL_NAMES = frozenset(logging.getLevelName(v) for v in _LEVELS)
