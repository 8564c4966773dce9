"""The notifier sends a run's traceparent as a header on its callback: as stored without
spans, the callback span's own with them; a delivery without one sends no header."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.engine import Engine

from common.callback_urls import CallbackUrlPolicy
from common.clock import ClusterClock
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.messages import CallbackMessage
from common.tracing.spans import NO_TRACING, OtelTracing, Tracing
from services.notifier.delivery import CallbackDeliverer
from services.notifier.posting import CallbackPoster
from services.notifier.schedule import RetrySchedule
from tests.e2e.harness import CallbackReceiver
from tests.integration.results_helpers import queued_jobs

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    server = CallbackReceiver()
    yield server
    server.close()


@pytest.fixture
def poster() -> Iterator[CallbackPoster]:
    started = CallbackPoster(10.0, policy=CallbackUrlPolicy.from_settings("127.0.0.0/8", False))
    started.start()
    yield started
    started.close()


def deliverer(
    engine: Engine, client: redis.Redis, poster: CallbackPoster, tracing: Tracing = NO_TRACING
) -> CallbackDeliverer:
    clock = ClusterClock(client)
    return CallbackDeliverer(engine, poster, clock, RetrySchedule([1, 2]), tracing=tracing)


def recorded(engine: Engine, url: str, traceparents: list[str | None]) -> list[bytes]:
    """Deliveries to ``url``, one per traceparent; the messages that hand them over."""
    job_ids = queued_jobs(engine, len(traceparents))
    rows = [
        NewDelivery(f"msg_{n}", f"e-{job_id}", job_id, 1, url, "{}", traceparent)
        for n, (job_id, traceparent) in enumerate(zip(job_ids, traceparents, strict=True))
    ]
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).insert_deliveries(rows, 0)
    return [
        CallbackMessage(delivery_id=r.delivery_id, app_pk=1, url=url, payload="{}")
        .model_dump_json()
        .encode()
        for r in rows
    ]


def traceparent_of(received: CallbackReceiver) -> list[str | None]:
    return [
        next((v for k, v in r.headers.items() if k.lower() == "traceparent"), None)
        for r in received.received
    ]


def test_the_stored_traceparent_goes_as_a_header(
    engine: Engine,
    redis_client: redis.Redis,
    poster: CallbackPoster,
    receiver: CallbackReceiver,
) -> None:
    plain = deliverer(engine, redis_client, poster)
    for message in recorded(engine, receiver.url, [TRACEPARENT, None]):
        plain.deliver(message)
    assert traceparent_of(receiver) == [TRACEPARENT, None]


def test_with_spans_the_header_is_the_callback_spans(
    engine: Engine,
    redis_client: redis.Redis,
    poster: CallbackPoster,
    receiver: CallbackReceiver,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spanned = deliverer(engine, redis_client, poster, OtelTracing(provider))
    (message,) = recorded(engine, receiver.url, [TRACEPARENT])
    spanned.deliver(message)
    (span,) = exporter.get_finished_spans()
    assert span.name == "kairos callback"
    assert span.parent is not None and f"{span.parent.span_id:016x}" == TRACEPARENT[36:52]
    assert traceparent_of(receiver) == [f"00-{TRACEPARENT[3:35]}-{span.context.span_id:016x}-01"]
