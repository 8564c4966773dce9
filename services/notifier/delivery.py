"""Deliver one callback: sign, POST, record the attempt, and decide what comes next."""

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
from common.db.apps import signing_secrets
from common.messages import CallbackMessage, read_message
from common.metrics import CALLBACK_ATTEMPTS, CALLBACKS_DEFERRED
from common.states import DeliveryStatus
from common.topology import CALLBACKS_DEAD_QUEUE, CALLBACKS_RETRY_EXCHANGE, retry_queue
from services.notifier.posting import Poster, PostOutcome
from services.notifier.shares import AppShares
from services.notifier.signing import webhook_headers

log = logging.getLogger(__name__)


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
        retry_tiers: Sequence[int],
        secret_ttl: float = 30.0,
        shares: AppShares | None = None,
    ) -> None:
        self._engine = engine
        self._poster = poster
        self._clock = clock
        self._tiers = list(retry_tiers)
        self._secret_ttl = secret_ttl
        self._secrets: dict[int, tuple[float, list[str]]] = {}
        self._lock = threading.Lock()
        # Without a retry tier there is nowhere for an app's excess to wait.
        self._shares = shares if self._tiers else None

    def deliver(self, body: bytes) -> Attempt | None:
        """POST the callback in ``body``; None when it was delivered before.

        A body that cannot be read is parked in the dead-letter queue as it is: sent
        back to the callbacks queue it would come back for good. A callback whose app
        holds its share of the attempts (``AppShares``) waits in the first retry tier.
        """
        message = read_message(CallbackMessage, body)
        if message is None:
            log.error("parking a callback message that cannot be read: %r", body[:200])
            return Attempt(False, OutgoingMessage("", CALLBACKS_DEAD_QUEUE, body, "unreadable"))
        if self._shares is None:
            return self._attempt(message)
        if not self._shares.take(message.app_id):
            return self._defer(message)
        try:
            return self._attempt(message)
        finally:
            self._shares.give_back(message.app_id)

    def _attempt(self, message: CallbackMessage) -> Attempt | None:
        """One POST of the callback, recorded; None when it was delivered before."""
        with self._engine.connect() as conn:
            row = deliveries.get_delivery(conn, message.delivery_id)
        if row is None or row.status == DeliveryStatus.DELIVERED:
            return None
        outcome = self._post(message)
        follow_up = None if outcome.delivered else self._next_stop(message, outcome.refused)
        status = self._status_after(outcome.delivered, follow_up)
        with self._engine.begin() as conn:
            deliveries.record_attempt(
                conn,
                message.delivery_id,
                status,
                outcome.status_code,
                outcome.error,
                self._clock.now_ms(),
            )
        CALLBACK_ATTEMPTS.labels(outcome=status.lower()).inc()
        log.info(
            "callback attempt %d: %s",
            message.attempt,
            status.lower(),
            extra={"delivery_id": message.delivery_id},
        )
        return Attempt(outcome.delivered, follow_up)

    def _defer(self, message: CallbackMessage) -> Attempt:
        """Send the callback through the first retry tier unattempted: its app holds its
        share of the attempts already (its receivers are slow or hang)."""
        CALLBACKS_DEFERRED.inc()
        log.debug(
            "callback deferred: app %d holds its share of attempts",
            message.app_id,
            extra={"delivery_id": message.delivery_id},
        )
        queue = retry_queue(self._tiers[0])
        body = message.model_dump_json().encode()
        return Attempt(
            False, OutgoingMessage(CALLBACKS_RETRY_EXCHANGE, queue, body, message.delivery_id)
        )

    def _post(self, message: CallbackMessage) -> PostOutcome:
        headers = webhook_headers(
            self._signing_secrets(message.app_id),
            message.delivery_id,
            int(time.time()),
            message.payload,
        )
        return self._poster.post(message.url, message.payload, headers)

    def _signing_secrets(self, app_pk: int) -> list[str]:
        # Read again after a while, so a rotated secret is picked up, and the previous
        # one dropped when its overlap ends, without a restart. The read is outside the
        # lock: a slow MySQL must not hold up deliveries of other apps; two threads
        # reading one app at once is harmless.
        now = time.monotonic()
        with self._lock:
            cached = self._secrets.get(app_pk)
        if cached is not None and now - cached[0] < self._secret_ttl:
            return cached[1]
        with self._engine.connect() as conn:
            found = signing_secrets(conn, app_pk, self._clock.now_ms())
        with self._lock:
            self._secrets[app_pk] = (now, found)
        return found

    def _next_stop(self, message: CallbackMessage, refused: bool = False) -> OutgoingMessage:
        """The retry tier after this attempt, or the dead-letter queue after the last
        tier or at once for a URL the policy refused: a refusal does not heal by itself
        (an operator can replay it once KAIROS_CALLBACK_ALLOWED_NETWORKS admits it)."""
        later = message.model_copy(update={"attempt": message.attempt + 1})
        body = later.model_dump_json().encode()
        if message.attempt <= len(self._tiers) and not refused:
            queue = retry_queue(self._tiers[message.attempt - 1])
            return OutgoingMessage(CALLBACKS_RETRY_EXCHANGE, queue, body, message.delivery_id)
        return OutgoingMessage("", CALLBACKS_DEAD_QUEUE, body, message.delivery_id)

    @staticmethod
    def _status_after(delivered: bool, follow_up: OutgoingMessage | None) -> DeliveryStatus:
        if delivered:
            return DeliveryStatus.DELIVERED
        if follow_up is not None and follow_up.routing_key == CALLBACKS_DEAD_QUEUE:
            return DeliveryStatus.DEAD
        return DeliveryStatus.QUEUED


def follow_ups(attempts: Sequence[Attempt | None]) -> list[OutgoingMessage]:
    """The retry-tier or dead-letter messages for the attempts that failed."""
    return [a.follow_up for a in attempts if a is not None and a.follow_up is not None]
