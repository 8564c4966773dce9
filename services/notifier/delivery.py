"""Deliver one callback: sign, POST under its app's callback networks, record the
attempt, and decide what comes next.

An attempt is a task on the poster's event loop (``start_pending``), not a thread: it
awaits its delivery's read (mostly done ahead, while its callback waited in the line:
``read_ahead``), its POST and its record. The reads and records of the attempts going
at once are gathered into one statement set each and run in the deliverer's store
threads, so the loop never waits for MySQL (or for the cluster clock's Redis read).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.engine import Engine

from common.alerts.rules import AlertRule, RuleSource
from common.alerts.rules import signing_secret as alert_signing_secret
from common.alerts.system_alerts import record_dead_callbacks
from common.broker import OutgoingMessage
from common.clock import ClusterClock
from common.db.apps import MySqlAppTransactions
from common.db.deliveries import DeliveryToSend, NewAttempt
from common.db.delivery_store import MySqlDeliveryStore, MySqlDeliveryTransactions
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
from services.notifier.read_ahead import DeliveryReads
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


# Threads for the attempts' MySQL work: the gathered reads, the gathered records (one
# batch of each at a time) and the sending terms of an app not cached.
STORE_THREADS = 3

# Attempts recorded in one statement set at most. With the records one batch at a time,
# batches of 64 left hundreds of posted callbacks waiting for their records (and their
# acks), which emptied the line while the prefetch was used up; see bench/RESULTS.md.
RECORD_BATCH = 500

# Callbacks noted as copies at most (``note_copies``); past it the set starts again.
MAX_COPIES_NOTED = 100_000

# An attempt's record waiting to be gathered: the attempt, and the delay after which
# its retry is due (its ``next_attempt_at`` is set from the cluster clock when written).
PendingRecord = tuple[NewAttempt, int | None]


class CallbackDeliverer:
    """Runs attempts as tasks on the poster's loop: those the line starts there
    (``attempt_waiting``), and from any thread ``start_pending``. Close it after the
    poster's last attempt.

    ``scheduler``, when given, counted each attempt the line started and is told when
    it ends, and how its POST went. The attempts' reads of delivery rows, and their
    records, are gathered: one statement serves the attempts that come while the last
    one runs, in a store thread.
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
        alerts: RuleSource | None = None,
    ) -> None:
        self._engine = engine
        # The alert rules a callback going DEAD fires (read only when one does).
        self._alerts = alerts
        # Each app's signing secrets and networks (the apps aggregate).
        self._apps = MySqlAppTransactions(engine)
        # The deliveries aggregate: reads before attempts.
        self._deliveries = MySqlDeliveryTransactions(engine)
        self._tracing = tracing
        self._poster = poster
        self._clock = clock
        self._schedule = schedule
        self._secret_ttl = secret_ttl
        self._terms: dict[_TermsKey, tuple[float, SendingTerms]] = {}
        self._lock = threading.Lock()
        self._scheduler = scheduler
        self._backoff = backoff if backoff is not None else StoreBackoff()
        self._store = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="store")
        self._reads = DeliveryReads(Gathered(self._read_deliveries, self._store))
        self._records: Gathered[PendingRecord, None] = Gathered(
            self._record_attempts, self._store, most=RECORD_BATCH
        )
        self.counts = AttemptCounts()
        # Called (on the loop, once for the POSTs that end together) when POSTs end and
        # free their places: the line starts the next attempts then, on the loop, not
        # when the records are written (``LoopLine.pump``).
        self.on_posted: Callable[[], object] | None = None
        self._wake_due = False
        # Callbacks whose message came again from the broker (a notifier stopped, or
        # an attempt raised, before its ack): an earlier copy may have been attempted,
        # so each is read before its attempt, alone or not (``note_copies``).
        self._copies: set[str] = set()

    def close(self) -> None:
        """Stop the store threads once their work is done."""
        self._store.shutdown(wait=True)

    def deliver(self, body: bytes) -> Attempt | None:
        """POST the callback in ``body`` now, outside any line, and wait for it (from a
        thread other than the poster's loop); None when there is nothing to send."""
        return self.start_pending(read_pending(body, ShareKeys()), counted=False).result()

    def start_pending(self, unit: PendingCallback, counted: bool = True) -> Future[Attempt | None]:
        """Start the attempt of ``unit`` (``counted`` with the scheduler already) as a
        task on the poster's loop; its future (None: nothing to send).

        One that goes without an attempt (``settle_unsent``) needs no loop: its future
        is done at once.
        """
        message = unit.message
        if message is None or unit.park:
            settled: Future[Attempt | None] = Future()
            settled.set_result(self.settle_unsent(unit))
            return settled
        return self._poster.submit(self.attempt(message, unit, counted))

    def on_loop(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task on the poster's loop (from any thread)."""
        self._poster.submit(work)

    async def attempt_waiting(self, unit: PendingCallback) -> Attempt | None:
        """The attempt of a callback the line started (counted with the scheduler), on
        the poster's loop."""
        if unit.message is None:
            return self.settle_unsent(unit)
        return await self.attempt(unit.message, unit)

    def settle_unsent(self, unit: PendingCallback) -> Attempt:
        """Where a callback goes that is not attempted. A body that cannot be read is
        parked in the dead-letter queue as it is: sent back to the callbacks queue it
        would come back for good. A parked callback (its app's or host's backlog past
        its bound, or it waited too long) waits in the first retry delay."""
        if unit.message is None:
            log.error("parking a callback message that cannot be read: %r", unit.body[:200])
            dead = OutgoingMessage("", CALLBACKS_DEAD_QUEUE, unit.body, "unreadable")
            return Attempt(False, dead)
        return self._defer(unit.message)

    async def attempt(
        self, message: CallbackMessage, unit: PendingCallback, counted: bool = True
    ) -> Attempt | None:
        """The attempt of ``message``, on the poster's loop; None when there is nothing
        to send.

        A callback whose job has an earlier run's callback still on its way (read with
        its delivery row) is parked unattempted. MySQL out of reach: the attempt waits
        a jittered, growing while (``StoreBackoff``) before the error goes up and the
        message back to the queue.
        """
        place = _Place(self._scheduler if counted else None, unit, self._posted)
        try:
            return await self._backoff.run(lambda: self._attempt(message, place))
        finally:
            place.finish()

    def read_ahead(self, units: Sequence[PendingCallback]) -> None:
        """Read the delivery rows of these callbacks, waiting in the line, ahead of
        their attempts (on the poster's loop); those sent as recorded need none."""
        ids = [
            u.message.delivery_id
            for u in units
            if u.message is not None and not u.park and not self._as_recorded(u.message)
        ]
        if ids:
            self._reads.read_ahead(ids)

    def note_copies(self, units: Sequence[PendingCallback]) -> None:
        """These callbacks came again from the broker: read each before its attempt
        (the consumer's ``redelivered``, on its thread)."""
        if len(self._copies) > MAX_COPIES_NOTED:
            # Only after a storm of redeliveries; the copies still unread are then
            # taken as they say, as a message that is not a copy is.
            self._copies.clear()
        self._copies.update(u.message.delivery_id for u in units if u.message is not None)

    def _as_recorded(self, message: CallbackMessage) -> bool:
        """Whether ``message`` is sent as the results consumer published it: the first
        attempt of a callback alone on its job, never handed out before. Its row was
        just written QUEUED or PENDING with nothing before it, so reading it would say
        nothing the message does not."""
        return message.alone and message.attempt == 1 and message.delivery_id not in self._copies

    def _posted(self) -> None:
        """A POST freed its place: wake the line once for the POSTs ending together."""
        if self.on_posted is None or self._wake_due:
            return
        self._wake_due = True
        asyncio.get_running_loop().call_soon(self._wake_line)

    def _wake_line(self) -> None:
        self._wake_due = False
        if self.on_posted is not None:
            self.on_posted()

    async def _attempt(self, message: CallbackMessage, place: _Place) -> Attempt | None:
        """One POST of the callback, recorded; None when there is nothing to send."""
        if self._as_recorded(message):
            traceparent = message.traceparent
        else:
            found = await self._reads.read(message.delivery_id)
            self._copies.discard(message.delivery_id)
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
            traceparent = found.record.traceparent
        began = time.monotonic()
        outcome = await self._post(message, traceparent)
        seconds = time.monotonic() - began
        place.posted(seconds, outcome)
        duration_ms = int(seconds * 1000)
        verdict = judge(outcome, message.attempt, self._schedule, time.time())
        await self._record(message, outcome, verdict, duration_ms)
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

    async def _record(
        self, message: CallbackMessage, outcome: PostOutcome, verdict: Verdict, duration_ms: int
    ) -> None:
        record = NewAttempt(
            delivery_id=message.delivery_id,
            attempt=message.attempt,
            status=verdict.status,
            status_code=outcome.status_code,
            error=outcome.error,
            duration_ms=duration_ms,
            dead_reason=verdict.dead_reason,
        )
        await self._records.call((record, verdict.delay_ms))

    def _read_deliveries(self, delivery_ids: Sequence[str]) -> list[DeliveryToSend | None]:
        with self._deliveries.reading() as store:
            found = store.deliveries_to_send(delivery_ids)
        return [found.get(delivery_id) for delivery_id in delivery_ids]

    def _record_attempts(self, pending: Sequence[PendingRecord]) -> list[None]:
        # In a store thread: the cluster clock reads Redis now and then.
        now = self._clock.now_ms()
        records = [
            record if delay_ms is None else replace(record, next_attempt_at=now + delay_ms)
            for record, delay_ms in pending
        ]
        dead = [r.delivery_id for r in records if r.status is DeliveryStatus.DEAD]
        rules = self._alerts.rules() if dead and self._alerts is not None else ()
        record_until_written(self._engine, records, now, rules)
        return [None] * len(pending)

    def _follow_up(
        self, message: CallbackMessage, outcome: PostOutcome, verdict: Verdict
    ) -> OutgoingMessage | None:
        retry_in = verdict.delay_ms if verdict.status is DeliveryStatus.RETRYING else None
        if retry_in is None and verdict.status is not DeliveryStatus.DEAD:
            # Delivered, as most attempts are: the next message is not written at all.
            return None
        later = message.model_copy(update={"attempt": message.attempt + 1, "alone": False})
        body = later.model_dump_json().encode()
        if retry_in is not None:
            queue = retry_queue(retry_in)
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
        self.counts.add("parked unattempted")
        log.debug(
            "callback parked: the backlog of its host or of app %d is past its bound",
            message.app_pk,
            extra={"delivery_id": message.delivery_id},
        )
        return self._park(message)

    def _hold(self, message: CallbackMessage, job_id: int | None) -> Attempt:
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
        """The message through a delay of the first retry tier, to be read before its
        attempt when it comes back (it may be a copy, or its job's callbacks have moved
        on meanwhile)."""
        queue = retry_queue(self._park_delay_ms())
        body = message.model_copy(update={"alone": False}).model_dump_json().encode()
        return Attempt(
            False, OutgoingMessage(CALLBACKS_RETRY_EXCHANGE, queue, body, message.delivery_id)
        )

    def _park_delay_ms(self) -> int:
        """A delay of the first retry tier; without tiers, the shortest Retry-After rung."""
        if self._schedule.tiers:
            return self._schedule.rng.choice(self._schedule.buckets(0))
        return self._schedule.rungs()[0]

    async def _post(self, message: CallbackMessage, traceparent: str | None) -> PostOutcome:
        terms = await self._sending_terms(message)
        headers = webhook_headers(
            terms.secrets, message.delivery_id, int(time.time()), message.payload
        )
        post = self._poster.post_async
        if traceparent is None:  # most callbacks: nothing to trace
            return await post(message.url, message.payload, headers, terms.networks)
        attributes: Attributes = {
            "kairos.delivery_id": message.delivery_id,
            "kairos.attempt": message.attempt,
        }
        with self._tracing.span("kairos callback", traceparent, attributes) as handed:
            if handed is not None:
                headers[TRACEPARENT] = handed
            return await post(message.url, message.payload, headers, terms.networks)

    async def _sending_terms(self, message: CallbackMessage) -> SendingTerms:
        # Read again after a while, so a rotated secret or a changed network list is
        # picked up, and the previous secret dropped when its overlap ends, without a
        # restart. The read runs in a store thread: a slow MySQL must not hold up the
        # loop; two attempts reading one app at once is harmless.
        key = _terms_key(message)
        with self._lock:
            cached = self._terms.get(key)
        if cached is not None and time.monotonic() - cached[0] < self._secret_ttl:
            return cached[1]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._store, self._read_terms, key)

    def _read_terms(self, key: _TermsKey) -> SendingTerms:
        now = time.monotonic()
        kind, pk = key
        if kind == "alert":
            # An alert is signed with its rule's secret and reaches what the cluster's
            # default admits (no app's networks are its).
            with self._engine.connect() as conn:
                secret = alert_signing_secret(conn, pk)
            found = SendingTerms([secret] if secret is not None else [], None)
        else:
            with self._apps.reading() as apps:
                found = SendingTerms(
                    apps.signing_secrets(pk, self._clock.now_ms()), apps.callback_networks(pk)
                )
        with self._lock:
            self._terms[key] = (now, found)
        return found


# Whose terms a message is sent under: ("app", app row id) or ("alert", rule row id).
_TermsKey = tuple[str, int]


def _terms_key(message: CallbackMessage) -> _TermsKey:
    if message.alert_rule_pk is not None:
        return ("alert", message.alert_rule_pk)
    return ("app", message.app_pk)


class _Place:
    """An attempt's place with the scheduler (none for an attempt outside the line):
    its slot and shares, given back when its POST ends, and its job, when it ends."""

    def __init__(
        self,
        scheduler: AttemptScheduler | None,
        unit: PendingCallback,
        freed: Callable[[], None],
    ) -> None:
        self._scheduler = scheduler
        self._unit = unit
        self._freed = freed
        self._posted = False

    def posted(self, seconds: float, outcome: PostOutcome) -> None:
        """The POST took ``seconds`` and ended so: its host's limit follows, and the
        next attempt may start while this one's record is written."""
        if self._scheduler is not None:
            self._scheduler.observe(self._unit, seconds, outcome)
            self._scheduler.posted(self._unit)
            self._freed()
        self._posted = True

    def finish(self) -> None:
        """The attempt ended: its record written, or it stopped before (or raised)."""
        if self._scheduler is not None:
            self._scheduler.finish(self._unit, posted=self._posted)


@retry_conflicts("callback_attempt", attempts=None)
def record_until_written(
    engine: Engine,
    records: Sequence[NewAttempt],
    now_ms: int,
    rules: Sequence[AlertRule] = (),
) -> None:
    """Record attempts in one transaction, running it again after each lock conflict
    until it is written.

    The POSTs it records have happened: were the record given up, the messages would
    go back to the queue and the receivers would be sent them again. A lost connection
    still goes up (an outage), and the copies that come back may be POSTed again.

    A callback that went DEAD fires the alert ``rules`` in the same transaction; their
    alerts are recorded PENDING, and the leader's sweep hands them to the notifier
    within seconds (this stage owns no publisher of its own).
    """
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).record_attempts(records, now_ms)
        if rules:
            dead = [r.delivery_id for r in records if r.status is DeliveryStatus.DEAD]
            record_dead_callbacks(conn, rules, dead, now_ms)


def follow_ups(attempts: Sequence[Attempt | None]) -> list[OutgoingMessage]:
    """The retry-tier or dead-letter messages for the attempts that failed."""
    return [a.follow_up for a in attempts if a is not None and a.follow_up is not None]
