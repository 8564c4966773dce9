"""A local HTTP receiver for callbacks: each POST's body and ``webhook-id`` go to a
function of the test's, and the answer is the status it returns, or a 204 (after a
delay, for a slow receiver)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OnPost = Callable[[bytes, str], int | None]
"""Called with each POST's body and ``webhook-id`` as soon as the request is read; what
it returns is the answer's status (None: 204)."""


class LocalReceiver:
    """Serves POSTs on 127.0.0.1 (a free port, ``url``) in threads of its own."""

    def __init__(self, on_post: OnPost, delay_seconds: float = 0.0) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                status = on_post(body, self.headers.get("webhook-id", ""))
                if delay_seconds:
                    time.sleep(delay_seconds)
                self.send_response(204 if status is None else status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
