"""``kairos notifier``: deliver signed callbacks, retrying through tier queues."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from pika.adapters.blocking_connection import BlockingConnection

from common.broker import OutgoingMessage, connect
from common.callback_urls import CallbackUrlPolicy
from common.config import NotifierSettings
from common.consumer_work import ConsumerSettings, ConsumerWork
from common.heap import freeze_startup_heap
from common.host_lookups import HostLookups
from common.pooled_consumer import PooledConsumer
from common.runtime import keep_serving, open_stores, start_service
from common.topology import CALLBACKS_QUEUE, declare_core, declare_retry_tiers
from common.unit_packing import ONE_PER_MESSAGE, unchanged
from services.notifier.delivery import CallbackDeliverer, follow_ups
from services.notifier.posting import CallbackPoster
from services.notifier.schedule import RetrySchedule
from services.notifier.shares import (
    AppShares,
    DeliveryShares,
    ShareKeys,
    default_share,
    lookup_address,
)

log = logging.getLogger(__name__)


def retry_schedule(settings: NotifierSettings) -> RetrySchedule:
    """The retry schedule the settings describe."""
    return RetrySchedule(
        settings.retry_tiers(), settings.retry_jitter, settings.retry_after_cap_seconds
    )


# A receiving host's address, for its share, is waited for this long at most.
ADDRESS_LOOKUP_SECONDS = 2.0


def delivery_shares(settings: NotifierSettings) -> DeliveryShares:
    """Each app's and each receiving host's share of the notifier's attempts."""
    slots = settings.concurrency
    address_of = lookup_address(HostLookups(), ADDRESS_LOOKUP_SECONDS)
    return DeliveryShares(
        AppShares(slots, settings.app_share or default_share(slots)),
        AppShares(slots, settings.host_share or default_share(slots)),
        settings.share_wait_seconds,
        ShareKeys(address_of),
    )


def _declare(connection: BlockingConnection, settings: NotifierSettings) -> None:
    channel = connection.channel()
    declare_core(channel)
    declare_retry_tiers(channel, retry_schedule(settings).all_delays())
    channel.close()


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


def _serve(settings: NotifierSettings, deliverer: CallbackDeliverer, stop: threading.Event) -> None:
    """Consume callbacks on one connection until ``stop``, then let running posts end."""
    connection = connect(settings, "kairos notifier")
    consumer = None
    try:
        _declare(connection, settings)
        consumer = PooledConsumer(
            connection,
            ConsumerSettings(CALLBACKS_QUEUE, settings.concurrency, hold_unrouted=True),
            ConsumerWork(
                ONE_PER_MESSAGE,
                unchanged,
                deliverer.deliver,
                follow_ups,
                reroute=_redeclaring(connection, settings),
            ),
        )
        consumer.start()
        log.info("notifier consuming %s", CALLBACKS_QUEUE)
        while not stop.is_set():
            connection.process_data_events(time_limit=0.2)
        consumer.stop_consuming()
        while consumer.active:
            connection.process_data_events(time_limit=0.2)
    finally:
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
    deliverer = CallbackDeliverer(
        stores.engine,
        poster,
        stores.clock,
        retry_schedule(settings),
        settings.secret_cache_seconds,
        delivery_shares(settings),
    )
    freeze_startup_heap()
    keep_serving("notifier", lambda: _serve(settings, deliverer, stop), stop)
    poster.close()
    stores.engine.dispose()
    log.info("notifier stopped")
