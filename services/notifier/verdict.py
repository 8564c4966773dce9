"""What one attempt's outcome means for its delivery: delivered, tried again after a
delay, or dead (and why)."""

from __future__ import annotations

from dataclasses import dataclass

from common.states import DeadReason, DeliveryStatus
from services.notifier.posting import PostOutcome
from services.notifier.retry_after import HONOURED, retry_after_seconds
from services.notifier.schedule import RetrySchedule

GONE = 410


@dataclass(frozen=True)
class Verdict:
    """The delivery's state after an attempt; ``delay_ms`` until the next one when
    RETRYING, ``dead_reason`` when DEAD."""

    status: DeliveryStatus
    delay_ms: int | None = None
    dead_reason: DeadReason | None = None


def judge(outcome: PostOutcome, attempt: int, schedule: RetrySchedule, now_s: float) -> Verdict:
    """Only 2xx delivers; 410 Gone, and a URL the callback URL policy refuses, are dead
    at once; 429 and 503 with ``Retry-After`` wait as asked (capped) instead of the
    tier's delay; anything else (a redirect, an error, no answer) waits the next tier's
    delay, or is dead after the last attempt."""
    if outcome.delivered:
        return Verdict(DeliveryStatus.DELIVERED)
    if outcome.refused:
        return Verdict(DeliveryStatus.DEAD, dead_reason=DeadReason.REFUSED)
    if outcome.status_code == GONE:
        return Verdict(DeliveryStatus.DEAD, dead_reason=DeadReason.GONE)
    delay = schedule.delay_after(attempt)
    if delay is None:
        return Verdict(DeliveryStatus.DEAD, dead_reason=DeadReason.EXHAUSTED)
    if outcome.status_code in HONOURED:
        asked = retry_after_seconds(outcome.retry_after, now_s)
        if asked is not None:
            delay = schedule.retry_after(asked)
    return Verdict(DeliveryStatus.RETRYING, delay_ms=delay)
