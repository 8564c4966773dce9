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
from common.db import delivery_batches
from common.db.app_grants import callback_networks
from common.db.apps import signing_secrets
from common.db.deliveries import DeliveryToSend, NewAttempt
from common.db.retry import retry_conflicts
from common.messages import CallbackMessage
from common.metrics import CALLBACK_ATTEMPTS, CALLBACKS_DEFERRED, CALLBACKS_ORPHANED
from common.states import DeliveryStatus
from common.topology import CALLBACKS_DEAD_QUEUE, CALLBACKS_RETRY_EXCHANGE, retry_queue
from common.tracing.spans import NO_TRACING, Attributes, Tracing
from common.tracing.traceparent import HEADER as TRACEPARENT
from services.notifier.attempt_counts import AttemptCounts
from services.notifier.gathering import Gathered
from services.notifier.outages import StoreBackoff
from services.notifier.pending import PendingCallback, read_pending
from services.notifier.posting import Networks, Poster, PostOutcome
from services.notifier.schedule import RetrySchedule
from services.notifier.scheduler import AttemptScheduler
from services.notifier.shares import ShareKeys
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
    """Safe to call from many pool threads: the poster and the engine are thread-safe.

    ``scheduler``, when given, counted each attempt the line started (``deliver_pending``)
    and is told when it ends, and how its POST went. The threads' reads of delivery
    rows, and their records of attempts, are gathered: one statement serves the
    threads that come while the last one runs.
    """

    def __init__(
        self,
        engine: Engine,
        poster: Poster,
        clock: ClusterClock,
        schedule: RetrySchedule,
        secret_ttl: float = 30.0,
        scheduler: AttemptScheduler | None = None,
        backoff: StoreBackoff | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self._engine = engine
        self._tracing = tracing
        self._poster = poster
        self._clock = clock
        self._schedule = schedule
        self._secret_ttl = secret_ttl
        self._terms: dict[int, tuple[float, SendingTerms]] = {}
        self._lock = threading.Lock()
        self._scheduler = scheduler
        self._backoff = backoff if backoff is not None else StoreBackoff()
        self._reads: Gathered[str, DeliveryToSend | None] = Gathered(self._read_deliveries)
        self._records: Gathered[NewAttempt, None] = Gathered(self._record_attempts)
        self.counts = AttemptCounts()

    def deliver(self, body: bytes) -> Attempt | None:
        """POST the callback in ``body`` now, outside any line; None when there is
        nothing to send."""
        return self.deliver_pending(read_pending(body, ShareKeys()), counted=False)

    def deliver_pending(self, unit: PendingCallback, counted: bool = True) -> Attempt | None:
        """POST the callback the line started (its attempt ``counted`` with the
        scheduler); None when there is nothing to send.

        A body that cannot be read is parked in the dead-letter queue as it is: sent
        back to the callbacks queue it would come back for good. A parked callback (its
        app's or host's backlog past its bound) waits in the first retry delay, not
        attempted; so does one whose job has an earlier run's callback still on its way
        (read with its delivery row). MySQL out of reach: the pool thread waits a
        jittered, growing while (``StoreBackoff``) before the message goes back to the
        queue.
        """
        message = unit.message
        if message is None:
            log.error("parking a callback message that cannot be read: %r", unit.body[:200])
            dead = OutgoingMessage("", CALLBACKS_DEAD_QUEUE, unit.body, "unreadable")
            return Attempt(False, dead)
        if unit.park:
            return self._defer(message)
        try:
            return self._backoff.run(lambda: self._attempt(message, unit))
        finally:
            if counted and self._scheduler is not None:
                self._scheduler.finish(unit)

    def _attempt(self, message: CallbackMessage, unit: PendingCallback) -> Attempt | None:
        """One POST of the callback, recorded; None when there is nothing to send."""
        found = self._reads.call(message.delivery_id)
        if found is None:
            CALLBACKS_ORPHANED.inc()
            log.warning(
                "callback message of a delivery that no longer exists (pruned): not sent",
                extra={"delivery_id": message.delivery_id},
            )
            return None
        if found.record.status is DeliveryStatus.DELIVERED:
            return None
        if found.held:
            return self._hold(message, found.record.job_id)
        began = time.monotonic()
        outcome = self._post(message, found.record.traceparent)
        seconds = time.monotonic() - began
        if self._scheduler is not None:
            self._scheduler.observe(unit, seconds, outcome)
        duration_ms = int(seconds * 1000)
        verdict = judge(outcome, message.attempt, self._schedule, time.time())
        self._record(message, outcome, verdict, duration_ms)
        outcome_name = verdict.status.lower()
        CALLBACK_ATTEMPTS.labels(outcome=outcome_name).inc()
        self.counts.add(outcome_name)
        # A delivery is counted (``counts``); a failure keeps a line of its own.
        log.log(
            logging.DEBUG if outcome.delivered else logging.INFO,
            "callback attempt %d: %s",
            message.attempt,
            outcome_name,
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
        self._records.call(record)

    def _read_deliveries(self, delivery_ids: Sequence[str]) -> list[DeliveryToSend | None]:
        with self._engine.connect() as conn:
            found = delivery_batches.deliveries_to_send(conn, delivery_ids)
        return [found.get(delivery_id) for delivery_id in delivery_ids]

    def _record_attempts(self, records: Sequence[NewAttempt]) -> list[None]:
        record_until_written(self._engine, records, self._clock.now_ms())
        return [None] * len(records)

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
        """Send the callback through the first retry tier unattempted: its app's or its
        receiving host's backlog in this notifier is past its bound (a slow receiver)."""
        CALLBACKS_DEFERRED.labels(reason="backlog").inc()
        log.debug(
            "callback parked: the backlog of its host or of app %d is past its bound",
            message.app_pk,
            extra={"delivery_id": message.delivery_id},
        )
        return self._park(message)

    def _hold(self, message: CallbackMessage, job_id: int) -> Attempt:
        """Park the callback unattempted behind an earlier run's callback of its job,
        still on its way (in a retry tier, parked, or held by another notifier): a
        job's later callback never overtakes its earlier one."""
        CALLBACKS_DEFERRED.labels(reason="earlier").inc()
        log.debug(
            "callback parked: an earlier run's callback of its job is still on its way",
            extra={"delivery_id": message.delivery_id, "job_id": job_id},
        )
        return self._park(message)

    def _park(self, message: CallbackMessage) -> Attempt:
        """The message, unchanged, through a delay of the first retry tier."""
        queue = retry_queue(self._park_delay_ms())
        body = message.model_dump_json().encode()
        return Attempt(
            False, OutgoingMessage(CALLBACKS_RETRY_EXCHANGE, queue, body, message.delivery_id)
        )

    def _park_delay_ms(self) -> int:
        """A delay of the first retry tier; without tiers, the shortest Retry-After rung."""
        if self._schedule.tiers:
            return self._schedule.rng.choice(self._schedule.buckets(0))
        return self._schedule.rungs()[0]

    def _post(self, message: CallbackMessage, traceparent: str | None) -> PostOutcome:
        terms = self._sending_terms(message.app_pk)
        headers = webhook_headers(
            terms.secrets, message.delivery_id, int(time.time()), message.payload
        )
        if traceparent is None:  # most callbacks: nothing to trace
            return self._poster.post(message.url, message.payload, headers, terms.networks)
        attributes: Attributes = {
            "kairos.delivery_id": message.delivery_id,
            "kairos.attempt": message.attempt,
        }
        with self._tracing.span("kairos callback", traceparent, attributes) as handed:
            if handed is not None:
                headers[TRACEPARENT] = handed
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
def record_until_written(engine: Engine, records: Sequence[NewAttempt], now_ms: int) -> None:
    """Record attempts in one transaction, running it again after each lock conflict
    until it is written.

    The POSTs it records have happened: were the record given up, the messages would
    go back to the queue and the receivers would be sent them again. A lost connection
    still goes up (an outage), and the copies that come back may be POSTed again.
    """
    with engine.begin() as conn:
        delivery_batches.record_attempts(conn, records, now_ms)


def follow_ups(attempts: Sequence[Attempt | None]) -> list[OutgoingMessage]:
    """The retry-tier or dead-letter messages for the attempts that failed."""
    return [a.follow_up for a in attempts if a is not None and a.follow_up is not None]
