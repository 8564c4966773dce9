"""``kairos notifier``: deliver signed callbacks, retrying through tier queues."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.alerts.rules import RuleCache
from common.broker import OutgoingMessage, connect
from common.callback_urls import CallbackUrlPolicy
from common.clock import ClusterClock
from common.config import NotifierSettings
from common.consumer.pooled import PooledConsumer
from common.consumer.work import ConsumerSettings, ConsumerWork
from common.gc_freeze import freeze_startup_heap
from common.host_lookups import HostLookups
from common.messages import CALLBACK_PACK_MAX
from common.runtime import keep_serving, open_stores, start_service
from common.topology import (
    CALLBACK_PACKS_QUEUE,
    CALLBACKS_QUEUE,
    declare_core,
    declare_retry_tiers,
)
from common.tracing.spans import start_tracing
from services.notifier.delivery import CallbackDeliverer, follow_ups
from services.notifier.fair_line import Backlog, FairLine
from services.notifier.host_limits import HostLimits
from services.notifier.loop_line import LineHooks, LoopLine
from services.notifier.pending import CallbackPacking, PendingCallback
from services.notifier.posting import CallbackPoster, Poster
from services.notifier.schedule import RetrySchedule
from services.notifier.scheduler import AttemptScheduler
from services.notifier.shares import (
    AppShares,
    BackgroundAddresses,
    DeliveryShares,
    ShareKeys,
    default_share,
    lookup_address,
)
from services.notifier.standing import StandingReporter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NotifierParts:
    """What every connection's consumer shares: the deliverer, the scheduler of
    attempts and the host keys."""

    deliverer: CallbackDeliverer
    scheduler: AttemptScheduler
    keys: ShareKeys
    reporter: StandingReporter | None = None


def notifier_parts(
    settings: NotifierSettings, engine: Engine, poster: Poster, clock: ClusterClock
) -> NotifierParts:
    """The deliverer, scheduler and host keys the settings describe."""
    scheduler = attempt_scheduler(settings)
    deliverer = CallbackDeliverer(
        engine,
        poster,
        clock,
        retry_schedule(settings),
        settings.secret_cache_seconds,
        scheduler,
        tracing=start_tracing("notifier", settings.otel_endpoint),
        alerts=RuleCache(engine),
    )
    return NotifierParts(deliverer, scheduler, share_keys())


def _unchanged(units: Sequence[PendingCallback]) -> Sequence[PendingCallback]:
    return units


def retry_schedule(settings: NotifierSettings) -> RetrySchedule:
    """The retry schedule the settings describe."""
    return RetrySchedule(
        settings.retry_tiers(), settings.retry_jitter, settings.retry_after_cap_seconds
    )


# A receiving host's address, for its share, is waited for this long at most.
ADDRESS_LOOKUP_SECONDS = 2.0


# Run slots besides the attempts: parked and unreadable callbacks settle in them at
# once, even while every attempt is taken.
QUICK_SLOTS = 2


def attempt_scheduler(settings: NotifierSettings) -> AttemptScheduler:
    """Each app's and each receiving host's share of the notifier's attempts, and each
    host's adaptive limit."""
    slots = settings.concurrency
    shares = DeliveryShares(
        AppShares(slots, settings.app_share or default_share(slots)),
        AppShares(slots, settings.host_share or default_share(slots)),
    )
    limits = HostLimits(slots, settings.host_slow_seconds, slow_floor=default_share(slots))
    return AttemptScheduler(slots, shares, limits)


def share_keys() -> ShareKeys:
    """Host keys by registrable domain and by address, the address looked up in the
    background so that the consumer's thread never waits for DNS."""
    return ShareKeys(BackgroundAddresses(lookup_address(HostLookups(), ADDRESS_LOOKUP_SECONDS)))


def _declare(connection: BlockingConnection, settings: NotifierSettings) -> None:
    channel = connection.channel()
    declare_core(channel)
    declare_retry_tiers(channel, retry_schedule(settings).all_delays())
    channel.close()


def line_backlog(settings: NotifierSettings) -> Backlog:
    """The line's bounds: the apps' and hosts' backlogs, and the callbacks waiting at
    which it is full: the prefetch less a margin for those its attempts hold (running,
    or posted and being recorded), so that a full line is seen before the broker stops
    sending."""
    margin = max(settings.held_callbacks // 10, 2 * settings.concurrency + QUICK_SLOTS)
    full = max(0, settings.held_callbacks - margin)
    return Backlog(settings.app_backlog, settings.host_backlog, full)


def _redeclaring(
    connection: BlockingConnection, settings: NotifierSettings
) -> Callable[[Sequence[OutgoingMessage]], Sequence[OutgoingMessage]]:
    """The consumer's ``reroute``: a retry or dead-letter message the broker could not
    route (its queue deleted under the notifier) is published again, after a short
    jittered pause, once the queues are declared again; its delivery stays unacked
    until then (``hold_unrouted``)."""

    def reroute(lost: Sequence[OutgoingMessage]) -> Sequence[OutgoingMessage]:
        log.warning("%d callback messages were unroutable; declaring the queues again", len(lost))
        _declare(connection, settings)
        return lost

    return reroute


def held_packs(settings: NotifierSettings) -> int:
    """The packs one consumer holds at once: as many callbacks as ``held_callbacks``
    when they are full (one at least)."""
    return max(1, settings.held_callbacks // CALLBACK_PACK_MAX)


def _consumer_settings(settings: NotifierSettings) -> ConsumerSettings:
    """``held_callbacks`` single callbacks and ``held_packs`` packs held, and a run slot
    for every callback they carry: each goes into the line on the poster's loop as it
    arrives (``LoopLine``), where the scheduler bounds the POSTs going at once.

    Packs are held by the callbacks they carry, not by the message: the line takes a
    backlog that waited ``STALL_SECONDS`` for a stalled one (``fair_line``), so holding
    as many packs as single callbacks would hold so many callbacks that a fast
    receiver's burst would look stalled. The consumer acks a message once the attempts
    of all its callbacks are recorded.
    """
    packs = held_packs(settings)
    return ConsumerSettings(
        CALLBACKS_QUEUE,
        max(
            settings.held_callbacks + packs * CALLBACK_PACK_MAX,
            settings.concurrency + QUICK_SLOTS,
        ),
        prefetch=settings.held_callbacks,
        hold_unrouted=True,
        more_queues=((CALLBACK_PACKS_QUEUE, packs),),
    )


def loop_line(settings: NotifierSettings, parts: NotifierParts) -> LoopLine:
    """One consumer's fair line, served on the poster's loop by the deliverer."""
    deliverer = parts.deliverer
    line = FairLine(parts.scheduler, line_backlog(settings), on_waiting=deliverer.read_ahead)
    hooks = LineHooks(deliverer.on_loop, deliverer.attempt_waiting, deliverer.settle_unsent)
    return LoopLine(line, hooks)


def _serve(settings: NotifierSettings, parts: NotifierParts, stop: threading.Event) -> None:
    """Consume callbacks on one connection until ``stop``, then hand the waiting ones
    back to the queue and let running attempts end."""
    connection = connect(settings, "kairos notifier")
    consumer = None
    line = loop_line(settings, parts)
    try:
        _declare(connection, settings)
        consumer = PooledConsumer(
            connection,
            _consumer_settings(settings),
            ConsumerWork(
                CallbackPacking(parts.keys),
                _unchanged,
                None,
                follow_ups,
                reroute=_redeclaring(connection, settings),
                start=line.start,
                redelivered=parts.deliverer.note_copies,
            ),
        )
        parts.deliverer.on_posted = line.pump
        consumer.start()
        log.info("notifier consuming %s and %s", CALLBACKS_QUEUE, CALLBACK_PACKS_QUEUE)
        while not stop.is_set():
            connection.process_data_events(time_limit=0.2)
            if parts.reporter is not None:
                parts.reporter.maybe_report(parts.scheduler, line)
            parts.deliverer.counts.maybe_log()
        consumer.stop_consuming()
        line.give_back()
        while consumer.active:
            connection.process_data_events(time_limit=0.2)
    finally:
        parts.deliverer.on_posted = None
        line.drop()
        if consumer is not None:
            consumer.close()
        if connection.is_open:
            connection.close()


def run_notifier(settings: NotifierSettings) -> None:
    """Deliver callbacks until SIGTERM or SIGINT.

    Deliveries held on a lost broker connection return to the queue; a callback that
    was being posted may be posted again, with the same webhook-id.
    """
    stop = start_service("notifier", settings, settings.metrics_port, settings.metrics_host)
    stores = open_stores(settings, pool_size=settings.concurrency)
    policy = CallbackUrlPolicy.from_settings(
        settings.callback_allowed_networks, settings.callback_https_only
    )
    poster = CallbackPoster(settings.request_timeout_seconds, policy=policy)
    poster.start()
    parts = notifier_parts(settings, stores.engine, poster, stores.clock)
    reporter = StandingReporter(stores.redis, stores.keys, stores.clock.now_ms)
    parts = replace(parts, reporter=reporter)
    freeze_startup_heap()
    keep_serving("notifier", lambda: _serve(settings, parts, stop), stop)
    parts.deliverer.counts.maybe_log(at_once=True)
    reporter.close()
    poster.close()
    parts.deliverer.close()
    stores.engine.dispose()
    log.info("notifier stopped")
