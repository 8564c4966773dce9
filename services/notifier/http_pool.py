"""Keep-alive connections for callbacks, kept apart by who may use them.

A connection is checked against a policy when it opens (``services.notifier.pinning``)
and then reused, so it is kept under a key holding the app's allowed networks with the
scheme, host and port: one app's connection into a network it may reach never carries
another app's callback. Each key has a bounded number of connections at once (a caller
past it waits for one, within its own deadline), and keeps at most that many idle.

A connection goes back to its key only when its answer was read to the end; an idle
connection older than ``KEEPALIVE_SECONDS``, or one the receiver closed meanwhile, is
closed instead of used. Everything here runs on one event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable

from services.notifier.http_wire import AnswerReader
from services.notifier.pinning import Streams

PoolKey = tuple[Hashable, str, str, int]
"""An app's allowed networks (None: the default), scheme, host, port."""

# Connections at once per key: more than the notifier's attempts to one host.
MAX_CONNECTIONS_PER_KEY = 32
# Idle connections kept over every key: many hosts must not pile up sockets.
MAX_IDLE = 256
# How long an idle connection is kept (receivers commonly close theirs after 5-75 s).
KEEPALIVE_SECONDS = 4.0


class HttpConnection:
    """One open connection and the reader of its answers."""

    __slots__ = ("answers", "idle_since", "reader", "writer")

    def __init__(self, streams: Streams) -> None:
        self.reader, self.writer = streams
        self.answers = AnswerReader(self.reader)
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        """Whether an idle connection can carry a request: kept briefly, and not closed
        by the receiver meanwhile (as far as the loop has seen)."""
        fresh = now - self.idle_since < KEEPALIVE_SECONDS
        return fresh and not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        """Close the connection (its transport finishes closing on the loop)."""
        self.writer.close()


class _KeySlots:
    """One key's connections: how many are in use, the idle ones, who waits."""

    __slots__ = ("busy", "idle", "waiters")

    def __init__(self) -> None:
        self.busy = 0
        self.idle: list[HttpConnection] = []
        self.waiters: deque[asyncio.Future[None]] = deque()


class ConnectionPool:
    """Keyed, bounded keep-alive connections; ``acquire`` then always ``release``."""

    def __init__(self, per_key: int = MAX_CONNECTIONS_PER_KEY, max_idle: int = MAX_IDLE) -> None:
        self._per_key = per_key
        self._max_idle = max_idle
        self._keys: dict[PoolKey, _KeySlots] = {}
        self._idle = 0
        self._next_sweep = 0.0

    async def acquire(self, key: PoolKey) -> HttpConnection | None:
        """A slot under ``key``, waiting while its connections are all in use; with an
        idle connection to reuse, or None when the caller opens one."""
        slots = self._keys.get(key)
        if slots is None:
            slots = self._keys[key] = _KeySlots()
        if slots.busy >= self._per_key:
            await self._wait_for_slot(key, slots)
        else:
            slots.busy += 1
        now = time.monotonic()
        while slots.idle:
            connection = slots.idle.pop()
            self._idle -= 1
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def _wait_for_slot(self, key: PoolKey, slots: _KeySlots) -> None:
        waiter = asyncio.get_running_loop().create_future()
        slots.waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._pass_on(key, slots)  # handed a slot just as the caller gave up
            else:
                slots.waiters.remove(waiter)
            raise

    def release(self, key: PoolKey, connection: HttpConnection | None, reuse: bool) -> None:
        """Give back the slot taken under ``key``; ``connection`` is kept for the next
        request when ``reuse`` (its answer read to the end) and there is room, else
        closed."""
        slots = self._keys[key]
        now = time.monotonic()
        if connection is not None:
            if reuse and len(slots.idle) < self._per_key and self._idle < self._max_idle:
                connection.idle_since = now
                slots.idle.append(connection)
                self._idle += 1
            else:
                connection.close()
        self._pass_on(key, slots)
        if now >= self._next_sweep:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Close the idle connections past their time, under every key: a host called
        once must not keep a socket open."""
        self._next_sweep = now + KEEPALIVE_SECONDS
        for key, slots in list(self._keys.items()):
            kept = [c for c in slots.idle if c.usable(now)]
            for connection in slots.idle:
                if connection not in kept:
                    connection.close()
            self._idle -= len(slots.idle) - len(kept)
            slots.idle = kept
            if slots.busy == 0 and not kept:
                del self._keys[key]

    def _pass_on(self, key: PoolKey, slots: _KeySlots) -> None:
        """A slot freed: to the first caller still waiting, else back to the key."""
        while slots.waiters:
            waiter = slots.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        slots.busy -= 1
        if slots.busy == 0 and not slots.idle:
            del self._keys[key]

    def close_idle(self) -> list[asyncio.StreamWriter]:
        """Close every idle connection; their writers (to wait for their closing)."""
        closing = []
        for slots in self._keys.values():
            for connection in slots.idle:
                connection.close()
                closing.append(connection.writer)
            slots.idle.clear()
        self._idle = 0
        return closing
