"""The body of an alert: a Standard Webhooks envelope (``type`` ``alert.<kind>``) whose
``data`` carries a Slack-compatible ``text`` and the facts it tells."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from common.alerts.gate import Send
from common.alerts.kinds import AlertKind
from common.alerts.rules import AlertRule
from common.documents import JsonObject
from common.timefmt import iso_ms


@dataclass(frozen=True)
class AlertEvent:
    """One thing an alert rule may fire on: a run's end, a callback gone DEAD, a worker
    presumed dead. ``subject`` keys its de-duplication (a job id, a worker id);
    ``headline`` is what the alert's text says of it; ``facts`` go into ``data``."""

    kind: AlertKind
    subject: str
    app_pk: int | None
    at_ms: int
    headline: str
    facts: JsonObject = field(default_factory=dict)
    # A worker's last heartbeat: its death is told once however often it is seen.
    marker: int | None = None


def _window(rule: AlertRule) -> str:
    seconds = rule.every_seconds
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def _kept_back(send: Send) -> str:
    if not send.suppressed:
        return ""
    since = iso_ms(send.suppressed_since) if send.suppressed_since is not None else "then"
    return f"; and {send.suppressed:,} more since {since}"


def alert_payload(
    rule: AlertRule, event: AlertEvent, send: Send, streak: int | None, now_ms: int
) -> str:
    """The body of the alert ``event`` fires through ``rule``."""
    text = f"[Kairos] {event.headline}"
    if streak is not None and streak > 1:
        text += f" ({streak:,} failures in a row)"
    text += _kept_back(send)
    data: JsonObject = {
        "text": text,
        "kind": event.kind.value,
        "ruleId": rule.rule_id,
        "subject": event.subject,
        **event.facts,
        "suppressed": send.suppressed,
        "suppressedSince": iso_ms(send.suppressed_since) if send.suppressed_since else None,
    }
    if streak is not None:
        data["streak"] = streak
    return _envelope(event.kind, now_ms, data)


def summary_payload(rule: AlertRule, kind: AlertKind, subject: str, send: Send, now_ms: int) -> str:
    """The body of a summary: what a rule kept back of one kind and subject since its
    last alert, sent once its window is over and no new event sent one."""
    since = iso_ms(send.suppressed_since) if send.suppressed_since is not None else "then"
    what = f"job {subject}" if kind is not AlertKind.WORKER_GONE else f"worker {subject}"
    text = (
        f"[Kairos] {send.suppressed:,} more {kind.value} of {what} since {since} "
        f"(rule {rule.rule_id} sends one alert per {_window(rule)})"
    )
    data: JsonObject = {
        "text": text,
        "kind": kind.value,
        "ruleId": rule.rule_id,
        "subject": subject,
        **_subject_facts(kind, subject),
        "summary": True,
        "suppressed": send.suppressed,
        "suppressedSince": iso_ms(send.suppressed_since) if send.suppressed_since else None,
    }
    return _envelope(kind, now_ms, data)


def _subject_facts(kind: AlertKind, subject: str) -> JsonObject:
    """A summary's subject as an alert of its kind names it: ``workerId`` or ``jobId``."""
    if kind is AlertKind.WORKER_GONE:
        return {"workerId": subject}
    return {"jobId": int(subject)} if subject.isdigit() else {}


def _envelope(kind: AlertKind, now_ms: int, data: JsonObject) -> str:
    body = {"type": kind.event_type, "timestamp": iso_ms(now_ms), "data": data}
    return json.dumps(body, separators=(",", ":"))
