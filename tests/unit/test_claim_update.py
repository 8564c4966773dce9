"""What a claim does to its job, by the trigger's plan."""

from __future__ import annotations

from common.schedule import TriggerPlan
from common.states import JobStatus
from services.dispatcher.trigger.claim import Unplannable, claim_update


def test_a_recurring_job_moves_to_its_next_trigger() -> None:
    update = claim_update(TriggerPlan(True, 5, 10, hold=False))
    assert (update.next_trigger_time, update.status) == (10, JobStatus.WAITING)


def test_a_last_run_holds_its_job_so_that_it_ends_with_that_run() -> None:
    update = claim_update(TriggerPlan(True, 5, None, hold=False, end_reason="no time left"))
    assert (update.next_trigger_time, update.status) == (None, JobStatus.RUNNING)


def test_a_skipped_last_trigger_and_an_unplannable_one_end_the_job() -> None:
    assert claim_update(TriggerPlan(False, 5, None, hold=False)).status == JobStatus.FAILED
    assert claim_update(Unplannable("bad zone")).status == JobStatus.FAILED
