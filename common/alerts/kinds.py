"""What an alert rule fires on (``AlertKind``) and how an operator names the kinds."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from common.errors import KairosError
from common.states import ExecutionStatus


class AlertKind(StrEnum):
    """One kind of event an alert rule may fire on."""

    FAILED = "FAILED"
    LOST = "LOST"
    TIMED_OUT = "TIMED_OUT"
    DEAD_CALLBACK = "DEAD_CALLBACK"
    WORKER_GONE = "WORKER_GONE"

    @property
    def event_type(self) -> str:
        """The envelope's ``type``: ``alert.failed``, ``alert.worker_gone``..."""
        return "alert." + self.value.lower()


# The kinds a run's end fires, by the execution status it ended with.
RUN_KINDS: dict[ExecutionStatus, AlertKind] = {
    ExecutionStatus.FAILED: AlertKind.FAILED,
    ExecutionStatus.LOST: AlertKind.LOST,
    ExecutionStatus.TIMED_OUT: AlertKind.TIMED_OUT,
}
# The state row counting a job's failing run ends in a row, per rule.
STREAK_KIND = "STREAK"


class AlertRuleInvalid(KairosError):
    """An alert rule as asked cannot be made; the message says what to change."""


def parse_kinds(text: str) -> tuple[AlertKind, ...]:
    """``FAILED,LOST`` as kinds, in the order of ``AlertKind``, each once."""
    names = [part.strip().upper() for part in text.split(",") if part.strip()]
    if not names:
        raise AlertRuleInvalid("name at least one kind to alert on, e.g. --on FAILED,LOST")
    known = {k.value for k in AlertKind}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise AlertRuleInvalid(
            f"unknown alert kind {', '.join(unknown)}: use {', '.join(sorted(known))}"
        )
    return tuple(k for k in AlertKind if k.value in names)


def kinds_text(kinds: Iterable[AlertKind]) -> str:
    """The kinds as stored and shown: comma-separated."""
    return ",".join(k.value for k in kinds)
