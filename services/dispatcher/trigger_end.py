"""What a job becomes when one of its triggers ends: its run finished, or it was skipped.

Recording a run's outcome and the firer's skips both ask ``job_end``, and write its
answer with ``release_jobs`` (``common.db.jobs``), which keeps a job paused or
cancelled meanwhile as it is.
"""

from __future__ import annotations

from common.states import ExecutionStatus, JobStatus

# A job to release: its id, and its final status (None: it waits for its next trigger).
JobEnd = tuple[int, JobStatus | None]


def job_end(
    job_id: int,
    *,
    manual: bool,
    last: bool,
    status: ExecutionStatus,
    may_be_held: bool,
) -> JobEnd | None:
    """What the end of a trigger of job ``job_id``, in ``status`` (a run's final status,
    or SKIPPED), does to the job; None: the job's row is left as it is.

    - A manual run (an explicit "run now") never holds its job: nothing.
    - The job's last trigger (a one-shot job's, or a cron's past its last time) ends the
      job with it: SUCCEEDED if the run succeeded, FAILED otherwise (a skip too).
    - Any other trigger sends its job back to waiting if the trigger may hold it
      (``may_be_held``); a release finds a job that is not held as it is (it only
      bumps its version). The firer judges by the row's overlap policy (only QUEUE
      holds) and so leaves other rows alone, which the claim of the job's next
      trigger may hold; recording reads no overlap policy and releases every such job.
    """
    if manual:
        return None
    if last:
        final = JobStatus.SUCCEEDED if status is ExecutionStatus.SUCCEEDED else JobStatus.FAILED
        return job_id, final
    return (job_id, None) if may_be_held else None
