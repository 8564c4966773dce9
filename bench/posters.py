"""HTTP clients posting signed callbacks as fast as they can, one process each.

Every request is one Kairos would send: a callback payload of the usual size, signed
afresh (Standard Webhooks headers from ``services.notifier.signing``, a new webhook-id
and timestamp per request), POSTed to one URL over ``--connections`` keep-alive
connections, each carrying one request at a time. The clients:

- ``floor``: asyncio streams alone, the request written as bytes and the answer read by
  its ``content-length``; no timeout and no bound (what no client can beat);
- ``h11``: h11's state machine over asyncio streams, each exchange bounded in time;
- ``httptools``: httptools' response parser over asyncio streams, likewise bounded;
- ``kairos``: the notifier's own client, ``CallbackPoster.post_async`` on this
  process's loop (its pinned connect, keyed pool and bounds; the policy admits
  127.0.0.0/8), one task per connection;
- ``kairos-threads``: the same poster as the notifier drives it, from a thread per
  connection calling ``CallbackPoster.post`` (each POST handed to its loop and back);
- ``httpx``: one ``httpx.AsyncClient`` (its pool sized to the connections);
- ``aiohttp``: one ``aiohttp.ClientSession`` (``bench/aiohttp_poster.py``).

Each runs for ``--seconds`` and prints one JSON line: posts, posts/s, and the CPU
seconds this process used.

    .venv/bin/python bench/posters.py --client floor --url http://127.0.0.1:PORT/hook
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11
import httptools
import httpx

from common.callback_urls import CallbackUrlPolicy
from services.notifier.posting import CallbackPoster
from services.notifier.signing import webhook_headers

CLIENTS = ("floor", "h11", "httptools", "kairos", "kairos-threads", "httpx", "aiohttp")
# The bounds the notifier keeps on every exchange (its defaults).
TOTAL_SECONDS = 15.0
MAX_ANSWER_BYTES = 4 * 1024
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
PAYLOAD = json.dumps(
    {
        "type": "job.execution.finished",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "data": {
            "jobId": 123456,
            "jobName": "bench",
            "clientRequestId": None,
            "executionId": str(uuid.uuid4()),
            "attempt": 1,
            "status": "SUCCEEDED",
            "message": None,
            "result": None,
            "triggerTime": "2026-01-01T00:00:00.000Z",
            "startedAt": "2026-01-01T00:00:00.001Z",
            "endedAt": "2026-01-01T00:00:00.002Z",
        },
    },
    separators=(",", ":"),
)


class PostFailed(Exception):
    """A receiver answered something other than 200: the figures would not count."""


@dataclass(frozen=True)
class Target:
    """Where the posts go."""

    url: str
    host: str
    port: int
    path: str

    @classmethod
    def of(cls, url: str) -> Target:
        """The target of an ``http://host:port/path`` URL."""
        parts = urlsplit(url)
        return cls(url, parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/")


def signed_headers() -> dict[str, str]:
    """The headers of one callback, signed now, with a webhook-id of its own."""
    message_id = "msg_" + uuid.uuid4().hex
    return webhook_headers([SECRET], message_id, int(time.time()), PAYLOAD)


def raw_request(target: Target) -> bytes:
    """One signed POST as bytes on the wire."""
    body = PAYLOAD.encode()
    lines = [f"POST {target.path} HTTP/1.1", f"host: {target.host}:{target.port}"]
    lines += [f"{name}: {value}" for name, value in signed_headers().items()]
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


Exchange = Callable[[], Awaitable[None]]
"""One POST and its answer, on a connection of its own."""


async def floor_connection(target: Target) -> Exchange:
    """A connection posting with asyncio streams alone."""
    reader, writer = await asyncio.open_connection(target.host, target.port)

    async def exchange() -> None:
        writer.write(raw_request(target))
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise PostFailed(head[:200].decode(errors="replace"))
        for line in head.lower().split(b"\r\n"):
            if line.startswith(b"content-length:"):
                await reader.readexactly(int(line.split(b":", 1)[1]))

    return exchange


async def h11_connection(target: Target) -> Exchange:
    """A connection posting through h11."""
    reader, writer = await asyncio.open_connection(target.host, target.port)
    conn = h11.Connection(our_role=h11.CLIENT)
    body = PAYLOAD.encode()

    async def answer() -> int:
        status, taken = 0, 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                taken += len(event.data)
                if taken > MAX_ANSWER_BYTES:
                    raise PostFailed("answer past 4 KiB")
            elif isinstance(event, h11.EndOfMessage):
                conn.start_next_cycle()
                return status

    async def exchange() -> None:
        headers = [("host", f"{target.host}:{target.port}"), *signed_headers().items()]
        headers.append(("content-length", str(len(body))))
        request = h11.Request(method="POST", target=target.path, headers=headers)
        writer.write(conn.send(request) + conn.send(h11.Data(data=body)))
        writer.write(conn.send(h11.EndOfMessage()))
        async with asyncio.timeout(TOTAL_SECONDS):
            status = await answer()
        if status != 200:
            raise PostFailed(f"HTTP {status}")

    return exchange


class AnswerSeen:
    """httptools' callbacks for one answer at a time: its status and its end."""

    def __init__(self) -> None:
        self.done = False
        self.taken = 0

    def on_body(self, body: bytes) -> None:
        """Count the body, to bound it."""
        self.taken += len(body)

    def on_message_complete(self) -> None:
        """The answer is complete."""
        self.done = True


async def httptools_connection(target: Target) -> Exchange:
    """A connection posting with httptools' parser reading the answers."""
    reader, writer = await asyncio.open_connection(target.host, target.port)
    seen = AnswerSeen()
    parser = httptools.HttpResponseParser(seen)

    async def exchange() -> None:
        seen.done, seen.taken = False, 0
        writer.write(raw_request(target))
        async with asyncio.timeout(TOTAL_SECONDS):
            while not seen.done:
                parser.feed_data(await reader.read(65536))
                if seen.taken > MAX_ANSWER_BYTES:
                    raise PostFailed("answer past 4 KiB")
        if parser.get_status_code() != 200:
            raise PostFailed(f"HTTP {parser.get_status_code()}")

    return exchange


async def run_connections(
    open_one: Callable[[], Awaitable[Exchange]], connections: int, seconds: float
) -> int:
    """Post on ``connections`` connections until ``seconds`` have passed; the posts."""
    exchanges = [await open_one() for _ in range(connections)]
    until = time.monotonic() + seconds
    done = [0] * connections

    async def keep_posting(n: int) -> None:
        while time.monotonic() < until:
            await exchanges[n]()
            done[n] += 1

    await asyncio.gather(*(keep_posting(n) for n in range(connections)))
    return sum(done)


async def run_httpx(target: Target, connections: int, seconds: float) -> int:
    """Post from one httpx.AsyncClient with ``connections`` tasks."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(timeout=TOTAL_SECONDS, limits=limits) as client:

        async def exchange() -> None:
            response = await client.post(target.url, content=PAYLOAD, headers=signed_headers())
            if response.status_code != 200:
                raise PostFailed(f"HTTP {response.status_code}")

        async def open_one() -> Exchange:
            return exchange

        return await run_connections(open_one, connections, seconds)


def kairos_poster() -> CallbackPoster:
    """The notifier's poster with its default bounds, admitting this machine."""
    policy = CallbackUrlPolicy.from_settings("127.0.0.0/8", False)
    return CallbackPoster(TOTAL_SECONDS, MAX_ANSWER_BYTES, policy=policy)


async def run_kairos(target: Target, connections: int, seconds: float) -> int:
    """Post through ``CallbackPoster.post_async`` on this loop, ``connections`` tasks."""
    poster = kairos_poster()

    async def exchange() -> None:
        outcome = await poster.post_async(target.url, PAYLOAD, signed_headers())
        if outcome.status_code != 200:
            raise PostFailed(str(outcome.error))

    async def open_one() -> Exchange:
        return exchange

    return await run_connections(open_one, connections, seconds)


def run_kairos_threads(target: Target, connections: int, seconds: float) -> int:
    """Post through ``CallbackPoster.post`` from ``connections`` threads, as the
    notifier's attempt threads do."""
    poster = kairos_poster()
    poster.start()
    until = time.monotonic() + seconds

    def keep_posting() -> int:
        done = 0
        while time.monotonic() < until:
            outcome = poster.post(target.url, PAYLOAD, signed_headers())
            if outcome.status_code != 200:
                raise PostFailed(str(outcome.error))
            done += 1
        return done

    try:
        with ThreadPoolExecutor(connections) as pool:
            return sum(pool.map(lambda _: keep_posting(), range(connections)))
    finally:
        poster.close()


async def run_client(name: str, target: Target, connections: int, seconds: float) -> int:
    """The posts client ``name`` made in ``seconds``."""
    if name == "httpx":
        return await run_httpx(target, connections, seconds)
    if name == "kairos":
        return await run_kairos(target, connections, seconds)
    if name == "aiohttp":
        from aiohttp_poster import run_aiohttp

        return await run_aiohttp(target.url, PAYLOAD, signed_headers, connections, seconds)
    opens = {"floor": floor_connection, "h11": h11_connection, "httptools": httptools_connection}
    return await run_connections(lambda: opens[name](target), connections, seconds)


def main(argv: list[str] | None = None) -> int:
    """Post for a while; print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--client", choices=CLIENTS, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    cpu, began = os.times(), time.monotonic()
    target = Target.of(args.url)
    if args.client == "kairos-threads":
        posts = run_kairos_threads(target, args.connections, args.seconds)
    else:
        posts = asyncio.run(run_client(args.client, target, args.connections, args.seconds))
    wall, used = time.monotonic() - began, os.times()
    figures = {
        "client": args.client,
        "posts": posts,
        "posts_per_s": round(posts / wall, 1),
        "cpu_s": round(used.user + used.system - cpu.user - cpu.system, 2),
        "wall_s": round(wall, 2),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
