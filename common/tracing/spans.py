"""Spans for each stage a traced job passes (submit, dispatch, run, callback), sent to an
OTLP collector when the optional ``otel`` extra is installed and an endpoint is set.

Without both, every stage gets ``NO_TRACING``, which costs one ``nullcontext`` per job
and never imports OpenTelemetry. Only jobs that carry a traceparent get spans: each
span's parent is that traceparent, and the stage hands on the span's own traceparent,
so submit -> dispatch -> run -> callback is one trace.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

from common.tracing.traceparent import fresh_parent

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

Attributes = Mapping[str, str | int]
# The path an OTLP/HTTP collector takes traces at, added to a base endpoint.
TRACES_PATH = "/v1/traces"


class Tracing(Protocol):
    """Opens one span per traced job at a stage."""

    def span(
        self, name: str, traceparent: str | None, attributes: Attributes
    ) -> AbstractContextManager[str | None]:
        """A span named ``name`` under ``traceparent``; entering it gives the traceparent
        to hand on (the span's own; ``traceparent`` itself when nothing is traced)."""
        ...


class NoTracing:
    """No spans: the traceparent is handed on as it came."""

    def span(
        self, name: str, traceparent: str | None, attributes: Attributes
    ) -> AbstractContextManager[str | None]:
        """``traceparent`` as it is, at no cost."""
        return nullcontext(traceparent)


NO_TRACING: Tracing = NoTracing()

# The span a run of a recurring job (a claimed trigger, or a manual run) starts its own
# branch of the job's trace with.
TRIGGER_SPAN = "kairos trigger"


def branch(tracing: Tracing, traceparent: str, attributes: Attributes) -> str:
    """The traceparent a run that is its own branch of a job's trace carries: that of a
    ``TRIGGER_SPAN`` opened (and closed) under the job's ``traceparent``, so the run's
    spans hang under a span the collector has; with no spans sent, the job's trace id
    under a fresh parent id."""
    with tracing.span(TRIGGER_SPAN, traceparent, attributes) as handed:
        if handed is None or handed == traceparent:
            return fresh_parent(traceparent)
        return handed


class OtelTracing:
    """Spans through an OpenTelemetry tracer provider (the ``otel`` extra)."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self._tracer = provider.get_tracer("kairos")
        self._propagator = TraceContextTextMapPropagator()

    def span(
        self, name: str, traceparent: str | None, attributes: Attributes
    ) -> AbstractContextManager[str | None]:
        """A span under ``traceparent``; none for a job that carries no traceparent."""
        if traceparent is None:
            return nullcontext(None)
        return self._span(name, traceparent, attributes)

    @contextlib.contextmanager
    def _span(self, name: str, traceparent: str, attributes: Attributes) -> Iterator[str | None]:
        parent = self._propagator.extract({"traceparent": traceparent})
        with self._tracer.start_as_current_span(name, context=parent, attributes=dict(attributes)):
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            yield carrier.get("traceparent", traceparent)

    def shutdown(self) -> None:
        """Send what is buffered and stop the exporter."""
        self._provider.shutdown()


def otlp_endpoint(configured: str | None, environ: Mapping[str, str]) -> str | None:
    """The traces URL: ``KAIROS_OTEL_ENDPOINT`` (given as ``configured``), else the
    standard ``OTEL_EXPORTER_OTLP_ENDPOINT``; a base URL gets ``/v1/traces`` added."""
    base = configured or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    if base is None:
        return None
    base = base.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def start_tracing(service: str, configured_endpoint: str | None) -> Tracing:
    """The service's tracing: OTLP spans when an endpoint is set and the ``otel`` extra
    is installed, else ``NO_TRACING`` (an endpoint without the extra is logged once)."""
    endpoint = otlp_endpoint(configured_endpoint, os.environ)
    if endpoint is None:
        return NO_TRACING
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "an OTLP endpoint is set but OpenTelemetry is not installed: no spans are sent; "
            "install Kairos with its extra: pip install 'kairos[otel]'"
        )
        return NO_TRACING
    provider = TracerProvider(resource=Resource.create({"service.name": f"kairos-{service}"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    log.info("sending spans of traced jobs to %s", endpoint)
    return OtelTracing(provider)
