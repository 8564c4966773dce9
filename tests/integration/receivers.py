"""A local callback receiver for integration tests: records what arrives and when, and
answers from a script of status codes and headers (204 once the script runs out)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from common.callback_urls import CallbackUrlPolicy

# The receivers listen on this machine: the notifier's policy must admit loopback.
LOCAL_RECEIVERS = CallbackUrlPolicy.from_settings("127.0.0.0/8", False)


@dataclass(frozen=True)
class Arrival:
    """One request the receiver got."""

    at: float
    headers: dict[str, str]
    body: str


@dataclass(frozen=True)
class Answer:
    """What the receiver answers one request with."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()


class ScriptedReceiver:
    """Answers each POST with the next ``Answer`` of its script."""

    def __init__(self, script: list[Answer] | None = None, delay_seconds: float = 0.0) -> None:
        self.arrivals: list[Arrival] = []
        self.script = list(script or [])
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                with receiver.lock:
                    receiver.arrivals.append(
                        Arrival(
                            time.monotonic(), {k.lower(): v for k, v in self.headers.items()}, body
                        )
                    )
                    answer = receiver.script.pop(0) if receiver.script else Answer(204)
                time.sleep(delay_seconds)  # after the arrival is seen: a slow answer
                self.send_response(answer.status)
                for name, value in answer.headers:
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
