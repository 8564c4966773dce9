"""The words of the Kairos API for statuses and policies, as string enums.

A value a newer server sends that this client does not know is kept as a plain ``str``
where a model field reads ``Enum | str``, so an upgrade of the server never breaks a
client that only reads.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar


class JobStatus(StrEnum):
    """Where a job stands: waiting for its trigger, running it, or done."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"


FINISHED_JOB_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
"""Statuses a job never leaves: what ``wait`` waits for."""


class ExecutionStatus(StrEnum):
    """One attempt at one trigger; SCHEDULED and QUEUED are not final, the rest are."""

    SCHEDULED = "SCHEDULED"
    QUEUED = "QUEUED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"
    TIMED_OUT = "TIMED_OUT"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"


class MisfirePolicy(StrEnum):
    """What a trigger found too late does."""

    FIRE_ONCE = "FIRE_ONCE"
    SKIP = "SKIP"
    FIRE_ALL = "FIRE_ALL"


class OverlapPolicy(StrEnum):
    """What a recurring trigger does while the last run still goes."""

    ALLOW = "ALLOW"
    FORBID = "FORBID"
    QUEUE = "QUEUE"


class DependOn(StrEnum):
    """The outcome of a parent job's run that a child job's run waits for: SUCCEEDED,
    or FINISHED (it ran and ended, whatever its outcome)."""

    SUCCEEDED = "SUCCEEDED"
    FINISHED = "FINISHED"


class CallbackState(StrEnum):
    """Where one callback delivery stands."""

    PENDING = "PENDING"
    RETRYING = "RETRYING"
    DELIVERED = "DELIVERED"
    DEAD = "DEAD"


E = TypeVar("E", bound=StrEnum)


def enum_or_text(kind: type[E], value: str) -> E | str:
    """The enum member named by ``value``, or ``value`` itself when this client does
    not know it (a newer server)."""
    try:
        return kind(value)
    except ValueError:
        return value
