"""A due execution as the firer holds it, for the tests of the rules that judge one."""

from __future__ import annotations

from dataclasses import replace

from common.db.executions_with_job import ExecutionWithJob
from common.states import ExecutionStatus, JobStatus

NOW = 1_000_000


def due_row(n: int, **changes: object) -> ExecutionWithJob:
    """Execution ``n`` of job ``n``: a recurring ALLOW job's first attempt, due 10 ms ago,
    with ``changes`` made."""
    base = ExecutionWithJob(
        id=n,
        execution_id=f"e{n}",
        job_id=n,
        attempt=1,
        trigger_time=NOW - 10,
        scheduled_at=NOW - 10,
        worker_id=None,
        status=ExecutionStatus.SCHEDULED,
        manual=False,
        handler="demo.noop",
        params="{}",
        timeout_seconds=None,
        overlap_policy="ALLOW",
        misfire_policy="FIRE_ONCE",
        misfire_threshold_seconds=60,
        next_trigger_time=None,
        job_status=JobStatus.WAITING,
        recurring=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]
