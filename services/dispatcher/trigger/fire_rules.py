"""What happens to each execution whose time has come: sent, skipped, cancelled or held.

Pure rules over typed rows, so every case is unit-tested without servers; the firer
applies the decisions in one transaction.

- The job was cancelled: CANCELLED_SKIP.
- The job is PAUSED: a claimed trigger's first attempt of a recurring job is SKIPPED
  (a pause skips what falls inside it); a one-shot job's trigger and retries are held
  until the job is resumed; manual runs (an explicit "run now") are sent.
- A claimed trigger fired late (its dispatcher died between claim and fire) meets the
  misfire policy, its lateness counted from the time the claim set to fire it.
- A FORBID job's first attempt is SKIPPED while another run of the job is queued or
  going; its retry waits (held) meanwhile, since skipping it would drop the retry; and
  only one run of a FORBID job leaves in one fire.
- The job's app is disabled, or may no longer call the job's handler (an operator
  narrowed its handler patterns): a recurring job's claimed trigger is SKIPPED, saying
  so (its schedule goes on, and runs again once the app may); anything else (a one-shot
  trigger, a retry, a manual run) is held until the app is enabled or granted the
  handler. Callbacks of runs that already ran are delivered all the same.
- The rest is sent, to a live worker that runs its handler and has a free slot; one
  that no live worker runs waits (held), without holding anything else up.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from common.db.apps import DEFAULT_POLICY, AppPolicy
from common.db.executions_with_job import ExecutionWithJob
from common.schedule import (
    PAUSED_SKIP,
    MisfirePolicy,
    OverlapPolicy,
    late_fire_skip_reason,
    overlap_skip_reason,
)
from common.states import ExecutionStatus, JobStatus
from services.dispatcher.trigger_end import JobEnd, job_end

PAUSED_HOLD = "waiting: the job is paused; sent when it is resumed"
CANCELLED_SKIP = "cancelled: the job was cancelled before this run was sent"
FORBID_HOLD = "waiting: another run of the job is going (overlap policy FORBID)"
APP_DISABLED_SKIP = "skipped: the job's app is disabled (kairos app enable APP runs it again)"
APP_DISABLED_HOLD = "waiting: the job's app is disabled; sent when it is enabled"


def handler_fenced(handler: str) -> str:
    """The message of a run whose app may no longer call its handler."""
    return (
        f"the job's app may no longer call handler {handler!r}; an operator grants it with "
        "kairos app handlers APP --allow PATTERN"
    )


def app_fence(handler: str, policy: AppPolicy) -> str | None:
    """Why a run of ``handler`` may not start now under its app's policy, or None."""
    if policy.disabled:
        return "disabled"
    if not policy.handlers.allows(handler):
        return handler_fenced(handler)
    return None


def needs_slot(row: ExecutionWithJob, policy: AppPolicy) -> bool:
    """Whether the row, due now, would be sent (and so needs a free slot); the rest are
    settled by the rules without one (cancelled, paused, fenced by its app)."""
    if row.job_status is JobStatus.CANCELLED:
        return False
    if row.job_status is JobStatus.PAUSED and not row.manual:
        return False
    return app_fence(row.handler, policy) is None


@dataclass
class FireDecisions:
    """Every due execution in exactly one place; the dicts map row ids to messages."""

    cancelled: dict[int, str] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    held: dict[int, str] = field(default_factory=dict)
    to_send: list[ExecutionWithJob] = field(default_factory=list)


def decide(
    rows: Sequence[ExecutionWithJob],
    now_ms: int,
    busy_jobs: Collection[int],
    apps: Mapping[int, AppPolicy] | None = None,
    waited: Collection[int] = (),
) -> FireDecisions:
    """Decide each due execution; ``busy_jobs`` have a run queued or going already,
    ``apps`` are the policies of the rows' apps (by primary key), ``waited`` the keys
    of rows said to wait for a slot since they were read (as ``row.waited`` says)."""
    decisions = FireDecisions()
    latest = _latest_first_attempts(rows)
    forbid_sent: set[int] = set()
    for row in rows:
        fence = app_fence(row.handler, (apps or {}).get(row.app_pk, DEFAULT_POLICY))
        if row.job_status is JobStatus.CANCELLED:
            decisions.cancelled[row.id] = CANCELLED_SKIP
        elif fence is not None:
            _fenced(decisions, row, fence)
        elif row.job_status is JobStatus.PAUSED and not row.manual:
            if row.first_scheduled_attempt and row.recurring:
                decisions.skipped[row.id] = PAUSED_SKIP
            else:
                decisions.held[row.id] = PAUSED_HOLD
        elif row.id not in waited and (reason := _late_reason(row, now_ms, latest)) is not None:
            decisions.skipped[row.id] = reason
        elif (reason := _overlap_reason(row, busy_jobs, forbid_sent)) is not None:
            if row.first_scheduled_attempt:
                decisions.skipped[row.id] = reason
            else:
                decisions.held[row.id] = FORBID_HOLD
        else:
            decisions.to_send.append(row)
    return decisions


def _fenced(decisions: FireDecisions, row: ExecutionWithJob, fence: str) -> None:
    """A run its app may not start now: a recurring trigger skipped, the rest held."""
    skip = row.first_scheduled_attempt and row.recurring
    if fence == "disabled":
        if skip:
            decisions.skipped[row.id] = APP_DISABLED_SKIP
        else:
            decisions.held[row.id] = APP_DISABLED_HOLD
    elif skip:
        decisions.skipped[row.id] = f"skipped: {fence}"
    else:
        decisions.held[row.id] = f"waiting: {fence}"


def forbid_candidates(rows: Sequence[ExecutionWithJob]) -> list[int]:
    """The jobs whose runs the overlap rule must look up (FORBID attempts, retries too)."""
    return [r.job_id for r in rows if _forbids_overlap(r)]


def _forbids_overlap(row: ExecutionWithJob) -> bool:
    # A manual run is an explicit "run now": it goes whatever else runs.
    return row.overlap_policy == OverlapPolicy.FORBID and not row.manual


def _overlap_reason(
    row: ExecutionWithJob, busy_jobs: Collection[int], forbid_sent: set[int]
) -> str | None:
    if not _forbids_overlap(row):
        return None
    running = row.job_id in busy_jobs or row.job_id in forbid_sent
    reason = overlap_skip_reason(OverlapPolicy.FORBID, running)
    if reason is None:
        forbid_sent.add(row.job_id)
    return reason


def _latest_first_attempts(rows: Sequence[ExecutionWithJob]) -> dict[int, int]:
    latest: dict[int, int] = {}
    for row in rows:
        if row.first_scheduled_attempt:
            latest[row.job_id] = max(latest.get(row.job_id, 0), row.trigger_time)
    return latest


def _late_reason(row: ExecutionWithJob, now_ms: int, latest: dict[int, int]) -> str | None:
    """Misfire policy for a claimed trigger fired late (its dispatcher died first).

    Lateness counts from the time the claim set to fire it (``scheduled_at``): the claim
    applied the policy to the time before that, so a trigger stored long ago and claimed
    just now is not judged twice. A run that waited for a free slot, or was held, is not
    late either: Kairos met its trigger, a slot (or the hold) did not; nor is the run of
    a job with parents once held for them (its time is its parents' end, however long a
    dispatcher was away meanwhile).
    """
    threshold = row.misfire_threshold_seconds * 1000
    late_ms = now_ms - max(row.trigger_time, row.scheduled_at)
    if late_ms <= threshold or not row.first_scheduled_attempt or row.waited:
        return None
    if row.has_dependencies and row.scheduled_at > row.trigger_time:
        return None
    later_overdue = latest[row.job_id] > row.trigger_time or (
        row.job_status is JobStatus.WAITING
        and row.next_trigger_time is not None
        and now_ms - row.next_trigger_time > threshold
    )
    return late_fire_skip_reason(
        MisfirePolicy(row.misfire_policy), threshold, late_ms, later_overdue
    )


def release_on_skip(row: ExecutionWithJob, alone: bool = False) -> JobEnd | None:
    """What skipping this execution at fire time does to its job (``job_end``): a
    one-shot job, or a cron at its last trigger, ends FAILED; a recurring job its claim
    held (overlap policy QUEUE) waits for its next trigger.

    A job patched off QUEUE after the claim held it RUNNING is still held by this
    trigger: it is released too when this trigger is its only own run not ended
    (``alone``, read by ``may_have_held``'s callers after the skip is written). Any
    other recurring job was never held by this trigger, and its row is left alone: a
    claim of its next trigger, or a run still going, may hold it.
    """
    return job_end(
        row.job_id,
        manual=row.manual,
        last=not row.recurring or row.next_trigger_time is None,
        status=ExecutionStatus.SKIPPED,
        may_be_held=row.overlap_policy == OverlapPolicy.QUEUE
        or (alone and row.job_status is JobStatus.RUNNING),
    )


def may_have_held(row: ExecutionWithJob) -> bool:
    """Whether skipping this execution may release its job: its claim held the job, or
    may have, before a patch moved the job off overlap policy QUEUE."""
    return release_on_skip(row, alone=True) is not None


def no_worker_reason(handler: str) -> str:
    """The message of an execution held because no live worker runs its handler."""
    return f"waiting: no live worker runs handler {handler!r}"
