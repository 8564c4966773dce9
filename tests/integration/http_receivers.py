"""Callback receivers for the notifier's HTTP client tests: an asyncio server on
127.0.0.1 in a thread of its own, each request answered by a scripted coroutine."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """One request as the receiver read it: its head (lines, lower case) and body."""

    head: bytes
    body: bytes
    connection: int

    def header(self, name: str) -> list[str]:
        """The values of header ``name``, in order."""
        found = []
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.encode():
                found.append(value.strip().decode("latin-1"))
        return found


Answering = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request; False closes the connection after it."""


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """The next request's head and body; None when the client closed the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head[:-4], await reader.readexactly(length)


class ScriptedReceiver:
    """An HTTP/1.1 receiver whose answers are ``answer``'s; counts its connections and
    keeps every request. ``tls``: serve TLS with this context."""

    def __init__(self, answer: Answering, tls: ssl.SSLContext | None = None) -> None:
        self._answer = answer
        self._tls = tls is not None
        self.requests: list[Request] = []
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result()
        self.port = self._server.sockets[0].getsockname()[1]

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        """A URL naming this receiver."""
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        number = self.connections
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while (found := await read_request(reader)) is not None:
                request = Request(found[0], found[1], number)
                self.requests.append(request)
                if not await self._answer(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            self.open_now -= 1
            writer.close()
            self._tasks.discard(task)

    def close(self) -> None:
        """Stop serving, end every connection, stop the loop."""

        async def stop() -> None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await asyncio.sleep(0.05)  # the transports finish closing

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()


def answer_with(
    head: bytes, body: bytes = b"", keep_open: bool = True
) -> Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]:
    """An answering coroutine sending ``head`` (status line and headers, without the
    blank line) and ``body`` at once."""

    async def answer(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(head + b"\r\n\r\n" + body)
        await writer.drain()
        return keep_open

    return answer


def ok(body: bytes = b"") -> Answering:
    """200 with a content-length."""
    return answer_with(b"HTTP/1.1 200 OK\r\ncontent-length: %d" % len(body), body)
