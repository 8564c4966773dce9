"""The words Kairos uses for job, execution, worker and callback states."""

from __future__ import annotations

from enum import StrEnum


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

    PENDING: created, not yet confirmed in a worker queue; QUEUED: confirmed in a worker
    queue (or running there); the rest are final.
    """

    PENDING = "PENDING"
    QUEUED = "QUEUED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"


FINAL_EXECUTION_STATUSES = frozenset(
    {ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.LOST}
)


class WorkerState(StrEnum):
    """What a worker says of itself in its heartbeat."""

    ACTIVE = "ACTIVE"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"


class DeliveryStatus(StrEnum):
    """A callback delivery: recorded, handed to the notifier, delivered or parked."""

    PENDING = "PENDING"
    QUEUED = "QUEUED"
    DELIVERED = "DELIVERED"
    DEAD = "DEAD"
