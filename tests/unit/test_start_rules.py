"""The rules that decide, without servers, when a run times out and when a fresh copy
has its row read before it runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from common.db.executions_with_job import ExecutionWithJob
from common.messages import DispatchMessage
from common.started_marks import RECONCILER, RunMark
from common.states import ExecutionStatus, JobStatus
from services.dispatcher.upkeep.timeouts import (
    UNSTARTED_FACTOR,
    TimeoutSettings,
    past_timeout,
)
from services.worker.start_guard import Fresh, StartGuard, Verdict

NOW = 10_000_000
SETTINGS = TimeoutSettings(grace_ms=5_000, started_ttl_ms=60_000)
ROW = ExecutionWithJob(
    1,
    "e1",
    1,
    1,
    0,
    0,
    "w1",
    ExecutionStatus.QUEUED,
    False,
    "demo.noop",
    "{}",
    10,
    "ALLOW",
    "FIRE_ONCE",
    60,
    None,
    JobStatus.RUNNING,
    False,
    NOW - 60_000,
)


def test_a_run_times_out_counted_from_the_start_its_key_gives() -> None:
    just_started = RunMark("w1", None, 60_000)
    long_started = RunMark("w1", None, 60_000 - 20_000)  # started 20 s ago
    assert not past_timeout(ROW, just_started, NOW, SETTINGS)
    assert past_timeout(ROW, long_started, NOW, SETTINGS)


def test_an_ended_or_fenced_run_is_left_alone() -> None:
    assert not past_timeout(ROW, RunMark("w1", "{}", 0), NOW, SETTINGS)
    assert not past_timeout(ROW, RunMark(RECONCILER, None, 0), NOW, SETTINGS)


def test_an_unstarted_execution_times_out_only_after_many_timeouts() -> None:
    unstarted = RunMark()
    limit = 10_000 * UNSTARTED_FACTOR + SETTINGS.grace_ms
    assert not past_timeout(replace(ROW, dispatched_at=NOW - limit), unstarted, NOW, SETTINGS)
    assert past_timeout(replace(ROW, dispatched_at=NOW - limit - 1), unstarted, NOW, SETTINGS)


def test_a_longer_worker_ttl_makes_the_timeout_late_never_early() -> None:
    beyond = RunMark("w1", None, 600_000)  # more left than this dispatcher's TTL
    assert not past_timeout(replace(ROW, dispatched_at=NOW - 14_000), beyond, NOW, SETTINGS)


class Rows:
    """In-memory statuses, counting the reads."""

    def __init__(self, statuses: dict[str, ExecutionStatus]) -> None:
        self._statuses = statuses
        self.reads: list[list[str]] = []

    def statuses(self, execution_ids: Sequence[str]) -> dict[str, ExecutionStatus]:
        self.reads.append(list(execution_ids))
        return {e: s for e, s in self._statuses.items() if e in execution_ids}


def message(execution_id: str, dispatched_at: int, timeout: int | None = None) -> DispatchMessage:
    return DispatchMessage(
        execution_id=execution_id,
        job_id=1,
        attempt=1,
        trigger_time=0,
        handler="h",
        params={},
        dispatched_at=dispatched_at,
        timeout_seconds=timeout,
    )


def test_only_redelivered_or_late_copies_are_read_in_one_query() -> None:
    rows = Rows({"late": ExecutionStatus.TIMED_OUT, "again": ExecutionStatus.QUEUED})
    fresh = [
        Fresh(message("plain", NOW - 1_000, timeout=10), redelivered=False),
        Fresh(message("late", NOW - 11_000, timeout=10), redelivered=False),
        Fresh(message("again", NOW - 1_000), redelivered=True),
    ]
    verdicts = StartGuard(rows).verdicts(fresh, NOW, epoch_ms=0)
    assert rows.reads == [["late", "again"]]
    assert verdicts == {"late": Verdict.DROP, "again": Verdict.RUN}


def test_a_redelivered_copy_from_before_the_epoch_is_lost_unless_its_row_ended() -> None:
    rows = Rows({"ended": ExecutionStatus.SUCCEEDED, "open": ExecutionStatus.QUEUED})
    fresh = [
        Fresh(message("ended", NOW - 60_000), redelivered=True),
        Fresh(message("open", NOW - 60_000), redelivered=True),
        Fresh(message("no-row", NOW - 60_000), redelivered=True),
    ]
    verdicts = StartGuard(rows).verdicts(fresh, NOW, epoch_ms=NOW - 10_000)
    assert verdicts == {"ended": Verdict.DROP, "open": Verdict.LOST, "no-row": Verdict.LOST}
