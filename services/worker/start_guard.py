"""MySQL as the last check before a run starts, where Redis alone cannot tell.

A worker takes an execution's started key before running it, and that key is what
keeps a copy from running twice. Two cases need the execution's row as well:

- a copy the broker redelivers: if Redis lost its data since the execution was
  dispatched (``common/started_marks.py``), the key an earlier run took may be gone;
- a late start: a delivery that waited in the queue longer than its job's timeout may
  have been timed out (and retried) by the leader meanwhile.

Both are rare, so the check costs one query for the few executions concerned, never
one on the common path. A row that is final is not run again; a redelivered copy whose
earlier run may have happened without a trace in Redis is reported LOST (retried if
the job allows) rather than run a second time under the same execution id.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.engine import Engine

from common.db import executions_with_job
from common.messages import DispatchMessage
from common.started_marks import key_may_be_lost
from common.states import ExecutionStatus

log = logging.getLogger(__name__)

_UNFINISHED = frozenset({ExecutionStatus.SCHEDULED, ExecutionStatus.QUEUED})


class Verdict(enum.Enum):
    """What a fresh execution's row says of running it."""

    RUN = "run"
    DROP = "drop"  # its row is final: it ended, was timed out, cancelled or settled
    LOST = "lost"  # it may have run already, its started key gone with Redis's data


class RowStatuses(Protocol):
    """Where the guard reads executions' statuses from (MySQL in production)."""

    def statuses(self, execution_ids: Sequence[str]) -> dict[str, ExecutionStatus]:
        """The status of each execution that has a row."""


class MySQLRows:
    """Executions' statuses read from MySQL."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def statuses(self, execution_ids: Sequence[str]) -> dict[str, ExecutionStatus]:
        """The status of each execution that has a row, in one query."""
        with self._engine.connect() as conn:
            return executions_with_job.statuses(conn, execution_ids)


@dataclass(frozen=True)
class Fresh:
    """An execution whose started key this worker has just taken."""

    message: DispatchMessage
    redelivered: bool


def needs_check(fresh: Fresh, now_ms: int) -> bool:
    """Whether its row is read before it runs: redelivered, or starting later than its
    job's timeout after its dispatch."""
    timeout = fresh.message.timeout_seconds
    late = timeout is not None and now_ms - fresh.message.dispatched_at > timeout * 1000
    return fresh.redelivered or late


class StartGuard:
    """Reads the rows of the fresh executions that need it and says what to do."""

    def __init__(self, rows: RowStatuses | None) -> None:
        self._rows = rows

    def verdicts(self, fresh: Sequence[Fresh], now_ms: int, epoch_ms: int) -> dict[str, Verdict]:
        """A verdict for each execution checked (the rest run); raises what the row
        read raises (the caller gives the executions back)."""
        checked = [f for f in fresh if needs_check(f, now_ms)]
        if not checked or self._rows is None:
            return {}
        found = self._rows.statuses([f.message.execution_id for f in checked])
        verdicts = {
            f.message.execution_id: _verdict(f, found.get(f.message.execution_id), epoch_ms)
            for f in checked
        }
        for execution_id, verdict in verdicts.items():
            if verdict is not Verdict.RUN:
                log.warning(
                    "execution not started: %s", verdict.value, extra={"execution_id": execution_id}
                )
        return verdicts


def _verdict(fresh: Fresh, status: ExecutionStatus | None, epoch_ms: int) -> Verdict:
    if status is not None and status not in _UNFINISHED:
        return Verdict.DROP
    if fresh.redelivered and key_may_be_lost(fresh.message.dispatched_at, epoch_ms):
        return Verdict.LOST
    return Verdict.RUN
