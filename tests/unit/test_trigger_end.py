"""What a job becomes when a trigger of it ends: one rule for finished runs and skips."""

from __future__ import annotations

import pytest

from common.states import ExecutionStatus, JobStatus
from services.dispatcher.trigger_end import job_end

SUCCEEDED = ExecutionStatus.SUCCEEDED
FAILED = ExecutionStatus.FAILED
LOST = ExecutionStatus.LOST
SKIPPED = ExecutionStatus.SKIPPED


@pytest.mark.parametrize(
    ("status", "final"),
    [(SUCCEEDED, JobStatus.SUCCEEDED), (FAILED, JobStatus.FAILED), (LOST, JobStatus.FAILED)],
)
def test_a_last_trigger_ends_its_job_with_its_runs_outcome(
    status: ExecutionStatus, final: JobStatus
) -> None:
    for held in (True, False):
        assert job_end(7, manual=False, last=True, status=status, may_be_held=held) == (7, final)


def test_a_last_trigger_skipped_ends_its_job_failed() -> None:
    end = job_end(7, manual=False, last=True, status=SKIPPED, may_be_held=False)
    assert end == (7, JobStatus.FAILED)


@pytest.mark.parametrize("status", [SUCCEEDED, FAILED, SKIPPED])
def test_any_other_trigger_sends_its_job_back_to_waiting_if_it_may_hold_it(
    status: ExecutionStatus,
) -> None:
    assert job_end(7, manual=False, last=False, status=status, may_be_held=True) == (7, None)
    assert job_end(7, manual=False, last=False, status=status, may_be_held=False) is None


@pytest.mark.parametrize("last", [True, False])
@pytest.mark.parametrize("status", [SUCCEEDED, FAILED, SKIPPED])
def test_a_manual_run_leaves_its_job_as_it_is(last: bool, status: ExecutionStatus) -> None:
    assert job_end(7, manual=True, last=last, status=status, may_be_held=True) is None
