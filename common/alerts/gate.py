"""Whether an event sends an alert now: a job's failures in a row (a rule's streak),
and at most one alert per rule, kind and subject (job or worker) per the rule's window,
the ones kept back counted and told in the next alert or a summary.

Pure: the caller reads the states (``AlertState``) and writes back what comes out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class AlertState:
    """Where one rule stands for one kind and subject (an ``alert_states`` row)."""

    streak: int = 0
    last_sent_at: int | None = None
    suppressed: int = 0
    suppressed_since: int | None = None
    marker: int | None = None


@dataclass(frozen=True, slots=True)
class Send:
    """An alert to send now, and the events of its key kept back before it."""

    suppressed: int
    suppressed_since: int | None


def counted_failure(state: AlertState, streak: int) -> tuple[AlertState, bool]:
    """One more failing run end of a job (its STREAK state); whether its failures in a
    row reach ``streak`` (then every further failure does too, until a success)."""
    counted = replace(state, streak=state.streak + 1)
    return counted, counted.streak >= streak


def admit(state: AlertState, now_ms: int, every_ms: int) -> tuple[AlertState, Send | None]:
    """One event of a key: sent now when no alert of the key went in the last
    ``every_ms``, carrying the count kept back since the last; else kept back."""
    if state.last_sent_at is None or now_ms - state.last_sent_at >= every_ms:
        sent = Send(state.suppressed, state.suppressed_since)
        return replace(state, last_sent_at=now_ms, suppressed=0, suppressed_since=None), sent
    since = state.suppressed_since if state.suppressed_since is not None else now_ms
    return replace(state, suppressed=state.suppressed + 1, suppressed_since=since), None


def summary_due(state: AlertState, now_ms: int, every_ms: int) -> bool:
    """Whether events kept back wait for a summary: the window after the last alert is
    over and no event since sent one."""
    return (
        state.suppressed > 0
        and state.last_sent_at is not None
        and now_ms - state.last_sent_at >= every_ms
    )


def summarised(state: AlertState, now_ms: int) -> tuple[AlertState, Send]:
    """The summary of what a key kept back, sent now; the state after it."""
    sent = Send(state.suppressed, state.suppressed_since)
    return replace(state, last_sent_at=now_ms, suppressed=0, suppressed_since=None), sent
