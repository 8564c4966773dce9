"""The firing rules on typed rows: what a due execution becomes."""

from __future__ import annotations

from common.schedule import PAUSED_SKIP
from common.states import JobStatus
from services.dispatcher.trigger.fire_rules import (
    CANCELLED_SKIP,
    FORBID_HOLD,
    PAUSED_HOLD,
    decide,
    forbid_candidates,
    release_on_skip,
)
from tests.unit.due_rows import NOW
from tests.unit.due_rows import due_row as row


def test_an_ordinary_due_execution_is_sent() -> None:
    decisions = decide([row(1)], NOW, set())
    assert [r.id for r in decisions.to_send] == [1]


def test_a_cancelled_jobs_execution_is_cancelled() -> None:
    decisions = decide([row(1, job_status=JobStatus.CANCELLED)], NOW, set())
    assert decisions.cancelled == {1: CANCELLED_SKIP}


def test_a_paused_recurring_jobs_trigger_is_skipped_its_retry_held_its_manual_run_sent() -> None:
    paused = JobStatus.PAUSED
    rows = [
        row(1, job_status=paused),
        row(2, job_status=paused, attempt=2),
        row(3, job_status=paused, manual=True),
        row(4, job_status=paused, recurring=False),
    ]
    decisions = decide(rows, NOW, set())
    assert decisions.skipped == {1: PAUSED_SKIP}
    assert decisions.held == {2: PAUSED_HOLD, 4: PAUSED_HOLD}
    assert [r.id for r in decisions.to_send] == [3]


def test_a_late_claimed_trigger_meets_its_misfire_policy_a_late_retry_does_not() -> None:
    late = {"trigger_time": NOW - 120_000, "scheduled_at": NOW - 120_000}
    rows = [
        row(1, misfire_policy="SKIP", **late),
        row(2, misfire_policy="SKIP", attempt=2, **late),
        row(3, misfire_policy="FIRE_ALL", **late),
    ]
    decisions = decide(rows, NOW, set())
    assert list(decisions.skipped) == [1]
    assert [r.id for r in decisions.to_send] == [2, 3]


def test_lateness_counts_from_the_claim_so_a_trigger_claimed_late_is_not_judged_again() -> None:
    # Stored long ago, claimed a moment ago: the claim applied the misfire policy to the
    # time before it (and chose to run it, scheduled_at = the claim's now). The firer
    # judges only the time since: a dispatcher that died between claim and fire.
    long_ago = NOW - 10**14
    rows = [
        row(1, trigger_time=long_ago, scheduled_at=NOW - 100, misfire_policy="SKIP"),
        row(2, trigger_time=long_ago, scheduled_at=NOW - 100, recurring=False),
        row(3, trigger_time=long_ago, scheduled_at=NOW - 120_000, misfire_policy="SKIP"),
    ]
    decisions = decide(rows, NOW, set())
    assert [r.id for r in decisions.to_send] == [1, 2]
    assert decisions.skipped == {3: "skipped: missed by 120.0 s (misfire policy SKIP)"}


def test_forbid_skips_a_first_attempt_while_its_job_runs_and_sends_one_per_fire() -> None:
    rows = [
        row(1, overlap_policy="FORBID"),
        row(2, overlap_policy="FORBID", job_id=7, trigger_time=NOW - 20),
        row(3, overlap_policy="FORBID", job_id=7, trigger_time=NOW - 10),
        row(4, overlap_policy="FORBID", job_id=9, attempt=2),
    ]
    assert forbid_candidates(rows) == [1, 7, 7, 9]
    decisions = decide(rows, NOW, busy_jobs={1})
    assert set(decisions.skipped) == {1, 3}
    assert [r.id for r in decisions.to_send] == [2, 4]


def test_forbid_holds_a_retry_while_another_run_of_its_job_goes() -> None:
    rows = [
        row(1, overlap_policy="FORBID", attempt=2),  # its job runs a later trigger
        row(2, overlap_policy="FORBID", job_id=7, attempt=2, trigger_time=NOW - 20),
        row(3, overlap_policy="FORBID", job_id=7, trigger_time=NOW - 10),  # same fire
        row(4, overlap_policy="FORBID", job_id=8, attempt=2, manual=True),
    ]
    assert forbid_candidates(rows) == [1, 7, 7]
    decisions = decide(rows, NOW, busy_jobs={1, 8})
    assert decisions.held == {1: FORBID_HOLD}
    assert set(decisions.skipped) == {3}
    assert [r.id for r in decisions.to_send] == [2, 4]


def test_a_skip_releases_only_a_job_its_claim_held() -> None:
    later = {"next_trigger_time": NOW + 1_000}
    assert release_on_skip(row(1, recurring=False)) == (1, JobStatus.FAILED)
    assert release_on_skip(row(2, next_trigger_time=None)) == (2, JobStatus.FAILED)  # last
    assert release_on_skip(row(3, overlap_policy="QUEUE", **later)) == (3, None)
    # Never held: its row may be held by an open claim of its next trigger.
    assert release_on_skip(row(4, overlap_policy="FORBID", **later)) is None
    assert release_on_skip(row(5, overlap_policy="ALLOW", **later)) is None
    assert release_on_skip(row(6, manual=True, recurring=False)) is None
