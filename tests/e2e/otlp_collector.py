"""A local OTLP/HTTP collector: takes the spans services export to ``/v1/traces`` and
keeps each as (service, name, trace id, span id, parent span id)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass(frozen=True)
class CollectedSpan:
    """One span as a service exported it; ids in lower-case hex."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str


def _service(resource_spans: Any) -> str:
    for attribute in resource_spans.resource.attributes:
        if attribute.key == "service.name":
            return str(attribute.value.string_value)
    return "?"


class OtlpCollector:
    """Serves ``POST /v1/traces`` (protobuf) on 127.0.0.1; ``base`` is its base URL."""

    def __init__(self) -> None:
        self.spans: list[CollectedSpan] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                collector._take(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        taken = [
            CollectedSpan(
                _service(rs), s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex()
            )
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]
        with self._lock:
            self.spans += taken

    def of_trace(self, trace_id: str) -> list[CollectedSpan]:
        """The spans collected so far of one trace."""
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
