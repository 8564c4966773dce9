"""The notifier keeps its connections to a receiver open across callbacks: a 2xx
answer's small body is read to its end, so the connection goes back to the pool
instead of being closed (a new TCP connection, lookup and TLS handshake per callback
would cap a notifier's rate)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from common.callback_urls import CallbackUrlPolicy
from services.notifier.posting import CallbackPoster


class CountingReceiver:
    """A keep-alive HTTP/1.1 receiver answering 200 with a short body, counting the
    connections it was asked on."""

    def __init__(self, body: bytes) -> None:
        self.peers: set[tuple[str, int]] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                receiver.peers.add(self.client_address)
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def poster() -> Iterator[CallbackPoster]:
    started = CallbackPoster(15, policy=CallbackUrlPolicy.from_settings("127.0.0.0/8", False))
    started.start()
    yield started
    started.close()


@pytest.mark.parametrize("body", [b"", b'{"ok": true}'])
def test_callbacks_to_one_receiver_reuse_one_connection(
    poster: CallbackPoster, body: bytes
) -> None:
    receiver = CountingReceiver(body)
    try:
        outcomes = [poster.post(receiver.url, "{}", {"content-type": "application/json"})]
        outcomes += [poster.post(receiver.url, "{}", {}) for _ in range(9)]
    finally:
        receiver.close()
    assert all(o.delivered for o in outcomes)
    assert len(receiver.peers) == 1, f"{len(receiver.peers)} connections for 10 callbacks"
