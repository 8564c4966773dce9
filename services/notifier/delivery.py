"""Deliver one callback: sign, POST under its app's callback networks, record the
attempt, and decide what comes next."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from common.broker import OutgoingMessage
from common.clock import ClusterClock
from common.db import deliveries
from common.db.app_grants import callback_networks
from common.db.apps import signing_secrets
from common.db.deliveries import NewAttempt
from common.db.retry import retry_conflicts
from common.messages import CallbackMessage, read_message
from common.metrics import CALLBACK_ATTEMPTS, CALLBACKS_DEFERRED, CALLBACKS_ORPHANED
from common.states import DeliveryStatus
from common.topology import CALLBACKS_DEAD_QUEUE, CALLBACKS_RETRY_EXCHANGE, retry_queue
from services.notifier.outages import StoreBackoff
from services.notifier.posting import Networks, Poster, PostOutcome
from services.notifier.schedule import RetrySchedule
from services.notifier.shares import DeliveryShares
from services.notifier.signing import webhook_headers
from services.notifier.verdict import Verdict, judge

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SendingTerms:
    """What a callback of one app is sent under: the secrets that sign it, and the
    networks it may reach besides public ones (None: the cluster's default)."""

    secrets: list[str]
    networks: Networks


@dataclass(frozen=True)
class Attempt:
    """How one POST went; ``follow_up`` is where the message goes next, if anywhere."""

    delivered: bool
    follow_up: OutgoingMessage | None


class CallbackDeliverer:
    """Safe to call from many pool threads: httpx and the engine are thread-safe."""

    def __init__(
        self,
        engine: Engine,
        poster: Poster,
        clock: ClusterClock,
        schedule: RetrySchedule,
        secret_ttl: float = 30.0,
        shares: DeliveryShares | None = None,
        backoff: StoreBackoff | None = None,
    ) -> None:
        self._engine = engine
        self._poster = poster
        self._clock = clock
        self._schedule = schedule
        self._secret_ttl = secret_ttl
        self._terms: dict[int, tuple[float, SendingTerms]] = {}
        self._lock = threading.Lock()
        # Without a retry tier there is nowhere for an app's excess to wait.
        self._shares = shares if schedule.tiers else None
        self._backoff = backoff if backoff is not None else StoreBackoff()

    def deliver(self, body: bytes) -> Attempt | None:
        """POST the callback in ``body``; None when there is nothing to send.

        A body that cannot be read is parked in the dead-letter queue as it is: sent
        back to the callbacks queue it would come back for good. A callback whose
        receiving host or app holds its share of the attempts (``DeliveryShares``) waits in
        the first retry tier. MySQL out of reach: the pool thread waits a jittered,
        growing while (``StoreBackoff``) before the message goes back to the queue.
        """
        message = read_message(CallbackMessage, body)
        if message is None:
            log.error("parking a callback message that cannot be read: %r", body[:200])
            return Attempt(False, OutgoingMessage("", CALLBACKS_DEAD_QUEUE, body, "unreadable"))
        return self._backoff.run(lambda: self._shared_attempt(message))

    def _shared_attempt(self, message: CallbackMessage) -> Attempt | None:
        if self._shares is None:
            return self._attempt(message)
        if not self._shares.take(message.app_pk, message.url):
            return self._defer(message)
        try:
            return self._attempt(message)
        finally:
            self._shares.give_back(message.app_pk, message.url)

    def _attempt(self, message: CallbackMessage) -> Attempt | None:
        """One POST of the callback, recorded; None when there is nothing to send."""
        with self._engine.connect() as conn:
            delivery = deliveries.get_delivery(conn, message.delivery_id)
        if delivery is None:
            CALLBACKS_ORPHANED.inc()
            log.warning(
                "callback message of a delivery that no longer exists (pruned): not sent",
                extra={"delivery_id": message.delivery_id},
            )
            return None
        if delivery.status is DeliveryStatus.DELIVERED:
            return None
        began = time.monotonic()
        outcome = self._post(message)
        duration_ms = int((time.monotonic() - began) * 1000)
        verdict = judge(outcome, message.attempt, self._schedule, time.time())
        self._record(message, outcome, verdict, duration_ms)
        CALLBACK_ATTEMPTS.labels(outcome=verdict.status.lower()).inc()
        log.info(
            "callback attempt %d: %s",
            message.attempt,
            verdict.status.lower(),
            extra={"delivery_id": message.delivery_id},
        )
        return Attempt(outcome.delivered, self._follow_up(message, outcome, verdict))

    def _record(
        self, message: CallbackMessage, outcome: PostOutcome, verdict: Verdict, duration_ms: int
    ) -> None:
        now = self._clock.now_ms()
        next_at = now + verdict.delay_ms if verdict.delay_ms is not None else None
        record = NewAttempt(
            delivery_id=message.delivery_id,
            attempt=message.attempt,
            status=verdict.status,
            status_code=outcome.status_code,
            error=outcome.error,
            duration_ms=duration_ms,
            next_attempt_at=next_at,
            dead_reason=verdict.dead_reason,
        )
        record_until_written(self._engine, record, now)

    def _follow_up(
        self, message: CallbackMessage, outcome: PostOutcome, verdict: Verdict
    ) -> OutgoingMessage | None:
        later = message.model_copy(update={"attempt": message.attempt + 1})
        body = later.model_dump_json().encode()
        if verdict.status is DeliveryStatus.RETRYING and verdict.delay_ms is not None:
            queue = retry_queue(verdict.delay_ms)
            return OutgoingMessage(CALLBACKS_RETRY_EXCHANGE, queue, body, message.delivery_id)
        if verdict.status is DeliveryStatus.DEAD:
            headers = {
                "x-kairos-dead-reason": str(verdict.dead_reason),
                "x-kairos-attempts": message.attempt,
                "x-kairos-last-status": outcome.status_code or 0,
                "x-kairos-last-error": (outcome.error or "")[:500],
            }
            return OutgoingMessage("", CALLBACKS_DEAD_QUEUE, body, message.delivery_id, headers)
        return None

    def _defer(self, message: CallbackMessage) -> Attempt:
        """Send the callback through the first retry tier unattempted: its receiving host
        or its app holds its share of the attempts already (slow or hanging receivers)."""
        CALLBACKS_DEFERRED.inc()
        log.debug(
            "callback deferred: its host or app %d holds its share of attempts",
            message.app_pk,
            extra={"delivery_id": message.delivery_id},
        )
        queue = retry_queue(self._schedule.rng.choice(self._schedule.buckets(0)))
        body = message.model_dump_json().encode()
        return Attempt(
            False, OutgoingMessage(CALLBACKS_RETRY_EXCHANGE, queue, body, message.delivery_id)
        )

    def _post(self, message: CallbackMessage) -> PostOutcome:
        terms = self._sending_terms(message.app_pk)
        headers = webhook_headers(
            terms.secrets, message.delivery_id, int(time.time()), message.payload
        )
        return self._poster.post(message.url, message.payload, headers, terms.networks)

    def _sending_terms(self, app_pk: int) -> SendingTerms:
        # Read again after a while, so a rotated secret or a changed network list is
        # picked up, and the previous secret dropped when its overlap ends, without a
        # restart. The read is outside the lock: a slow MySQL must not hold up
        # deliveries of other apps; two threads reading one app at once is harmless.
        now = time.monotonic()
        with self._lock:
            cached = self._terms.get(app_pk)
        if cached is not None and now - cached[0] < self._secret_ttl:
            return cached[1]
        with self._engine.connect() as conn:
            found = SendingTerms(
                signing_secrets(conn, app_pk, self._clock.now_ms()),
                callback_networks(conn, app_pk),
            )
        with self._lock:
            self._terms[app_pk] = (now, found)
        return found


@retry_conflicts("callback_attempt", attempts=None)
def record_until_written(engine: Engine, record: NewAttempt, now_ms: int) -> None:
    """Record an attempt, running it again after each lock conflict until it is written.

    The POST it records has happened: were the record given up, the message would go
    back to the queue and the receiver would be sent it again. A lost connection still
    goes up (an outage), and the copy that comes back may be POSTed again.
    """
    with engine.begin() as conn:
        deliveries.record_attempt(conn, record, now_ms)


def follow_ups(attempts: Sequence[Attempt | None]) -> list[OutgoingMessage]:
    """The retry-tier or dead-letter messages for the attempts that failed."""
    return [a.follow_up for a in attempts if a is not None and a.follow_up is not None]
