"""``kairos notifier``: deliver signed callbacks, retrying through tier queues."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import redis
from pika.exceptions import AMQPError

from common.broker import connect
from common.clock import ClusterClock
from common.config import NotifierSettings
from common.db.engine import make_engine, require_schema
from common.errors import PublishFailedError, StoreUnavailableError
from common.heap import freeze_startup_heap
from common.logs import setup_logging
from common.metrics import start_metrics_server
from common.pooled_consumer import ONE_PER_MESSAGE, PooledConsumer, unchanged
from common.topology import CALLBACKS_QUEUE, declare_core, declare_retry_tiers
from services.notifier.delivery import CallbackDeliverer, follow_ups
from services.notifier.posting import CallbackPoster

log = logging.getLogger(__name__)


def _serve(settings: NotifierSettings, deliverer: CallbackDeliverer, stop: threading.Event) -> None:
    """Consume callbacks on one connection until ``stop``, then let running posts end."""
    connection = connect(settings, "kairos notifier")
    consumer = None
    try:
        setup = connection.channel()
        declare_core(setup)
        declare_retry_tiers(setup, settings.retry_tiers())
        setup.close()
        consumer = PooledConsumer(
            connection,
            CALLBACKS_QUEUE,
            settings.concurrency,
            ONE_PER_MESSAGE,
            unchanged,
            deliverer.deliver,
            follow_ups,
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
    """Deliver callbacks until SIGTERM or SIGINT."""
    setup_logging("notifier", settings.log_level, settings.log_json)
    if settings.metrics_port is not None:
        start_metrics_server(settings.metrics_port, settings.metrics_host)
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        log.info("received signal %d; stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    engine = make_engine(settings, pool_size=settings.concurrency)
    require_schema(engine, settings.namespace)
    client = redis.Redis.from_url(settings.redis_url)
    poster = CallbackPoster(settings.request_timeout_seconds)
    poster.start()
    deliverer = CallbackDeliverer(
        engine,
        poster,
        ClusterClock(client),
        settings.retry_tiers(),
        settings.secret_cache_seconds,
    )
    freeze_startup_heap()
    while not stop.is_set():
        try:
            _serve(settings, deliverer, stop)
        except (AMQPError, PublishFailedError, StoreUnavailableError) as e:
            # Deliveries held on the lost connection return to the queue; a callback that
            # was being posted may be posted again, with the same webhook-id.
            log.warning("lost the broker connection (%r); reconnecting in 2 s", e)
            stop.wait(2.0)
    poster.close()
    engine.dispose()
    log.info("notifier stopped")
