"""A callback receiver fast enough not to be what a callback benchmark measures.

A raw asyncio protocol (on uvloop when it is installed) that reads HTTP/1.1 requests
off keep-alive connections, answers every POST ``200`` with an empty body at once, and
counts the POSTs and their distinct ``webhook-id`` headers. No HTTP framework and no
thread per request: one request costs a few buffer searches and one write.

``GET /stats`` answers ``{"posts": n, "ids": distinct}`` and, with ``?reset=1``, starts
the counts again. Run it as its own process, so that its CPU time can be read apart
from the senders' (``/proc/<pid>/stat``):

    .venv/bin/python bench/fast_receiver.py --port 0

It prints ``listening <port>`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import cast

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
HEAD_END = b"\r\n\r\n"
LENGTH = b"\r\ncontent-length:"
WEBHOOK_ID = b"\r\nwebhook-id:"


class Counts:
    """What came, over all connections."""

    def __init__(self) -> None:
        self.posts = 0
        self.ids: set[bytes] = set()

    def stats(self, reset: bool) -> bytes:
        """The ``/stats`` answer; the counts start again when ``reset``."""
        body = json.dumps({"posts": self.posts, "ids": len(self.ids)}).encode()
        if reset:
            self.posts = 0
            self.ids = set()
        head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n"
        return head.encode() + b"content-type: application/json\r\n\r\n" + body


def header_value(head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case, with its leading CRLF and colon) in a
    lower-cased request head, or None."""
    start = head.find(name)
    if start < 0:
        return None
    start += len(name)
    end = head.find(b"\r\n", start)
    return head[start : end if end >= 0 else len(head)].strip()


class ReceiverProtocol(asyncio.Protocol):
    """One keep-alive connection: requests one after another, answered in order."""

    def __init__(self, counts: Counts) -> None:
        self._counts = counts
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport to answer on."""
        # uvloop's transports are not subclasses of asyncio.Transport; they behave as one.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """Answer every complete request in the buffer."""
        self._buffer += data
        answers = []
        while (answer := self._take_request()) is not None:
            answers.append(answer)
        if answers and self._transport is not None:
            self._transport.write(b"".join(answers))

    def _take_request(self) -> bytes | None:
        """The answer to the first complete request in the buffer, which it drops."""
        end = self._buffer.find(HEAD_END)
        if end < 0:
            return None
        head = bytes(self._buffer[:end]).lower()
        length = int(header_value(head, LENGTH) or 0)
        total = end + len(HEAD_END) + length
        if len(self._buffer) < total:
            return None
        del self._buffer[:total]
        if head.startswith(b"get /stats"):
            return self._counts.stats(reset=b"reset=1" in head.split(b"\r\n", 1)[0])
        self._counts.posts += 1
        self._counts.ids.add(header_value(head, WEBHOOK_ID) or b"")
        return OK


async def serve(port: int) -> None:
    """Listen on 127.0.0.1:``port`` (0: any free one) until killed."""
    counts = Counts()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: ReceiverProtocol(counts), "127.0.0.1", port, backlog=1024
    )
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.port))
    else:
        uvloop.run(serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
