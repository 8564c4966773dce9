"""The words Kairos uses for job, execution, worker and callback states."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class JobStatus(StrEnum):
    """Where a job stands: waiting for its trigger, running it, or done."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"


class ExecutionStatus(StrEnum):
    """One attempt at one trigger.

    SCHEDULED: created, to be sent to a worker at ``scheduled_at`` (a claimed trigger, a
    retry, a manual trigger); QUEUED: committed to a worker queue (or running there);
    the rest are final.
    """

    SCHEDULED = "SCHEDULED"
    QUEUED = "QUEUED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"
    TIMED_OUT = "TIMED_OUT"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


# The statuses a run can report for itself, and those a stand-in result gives a run that
# will not report one.
ReportedStatus = Literal[
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.LOST,
    ExecutionStatus.TIMED_OUT,
]
StandInStatus = Literal[ExecutionStatus.FAILED, ExecutionStatus.LOST, ExecutionStatus.TIMED_OUT]


class WorkerState(StrEnum):
    """What a worker says of itself in its heartbeat."""

    ACTIVE = "ACTIVE"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"
    # Written by the leading dispatcher, not the worker: gone so long, with nothing
    # queued on it, that its queue was deleted and the sweeps no longer look at it.
    FORGOTTEN = "FORGOTTEN"


class DeliveryStatus(StrEnum):
    """A callback delivery: recorded to be published (PENDING: alerts, and callbacks of
    triggers a claim ended, until the callbacks queue confirms them), handed to the
    callbacks queue (QUEUED: a run's callback is recorded so, by the results consumer
    that publishes it after its commit), waiting for its next attempt after a failed one
    (RETRYING), delivered, or parked after its last attempt (DEAD)."""

    PENDING = "PENDING"
    QUEUED = "QUEUED"
    RETRYING = "RETRYING"
    DELIVERED = "DELIVERED"
    DEAD = "DEAD"


class DeadReason(StrEnum):
    """Why a callback delivery is DEAD."""

    # Every attempt of the schedule failed.
    EXHAUSTED = "exhausted"
    # The receiver answered 410 Gone: it wants no more of these.
    GONE = "gone"
    # The callback URL policy refused the URL or an address it reaches: retrying would
    # not heal it (replay once KAIROS_CALLBACK_ALLOWED_NETWORKS admits it).
    REFUSED = "refused"
