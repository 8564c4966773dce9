"""Host name lookups (getaddrinfo) in threads that no other work shares.

getaddrinfo blocks and cannot be interrupted: a lookup that outlives its caller's
timeout holds its thread until the DNS gives up, seconds to tens of seconds later. In
a small shared pool (asyncio's default executor has min(32, cores + 4) threads) a few
such lookups, from one receiver whose DNS is down or an app naming fresh subdomains
of a silent domain, hold every thread, and every other host's lookup queues behind
them until it times out. So lookups run in threads of their own, up to
``max_threads``; concurrent lookups of one host share one thread; and a queued lookup
that nobody waits for any more is dropped rather than run.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

MAX_LOOKUP_THREADS = 256

HostKey = tuple[str, int]


@dataclass
class _Lookup:
    """One host's lookup, queued or under way, and how many callers wait for it."""

    answer: Future[Sequence[Any]] = field(default_factory=Future)
    waiting: int = 0


class HostLookups:
    """getaddrinfo for TCP, run in at most ``max_threads`` threads of its own."""

    def __init__(
        self,
        getaddrinfo: Callable[..., Sequence[Any]] = socket.getaddrinfo,
        max_threads: int = MAX_LOOKUP_THREADS,
    ) -> None:
        self._getaddrinfo = getaddrinfo
        self._max_threads = max_threads
        self._lock = threading.Lock()
        self._lookups: dict[HostKey, _Lookup] = {}
        self._queued: deque[HostKey] = deque()
        self._threads = 0

    async def getaddrinfo(self, host: str, port: int, timeout: float) -> Sequence[Any]:
        """getaddrinfo's answer for ``host``; ``TimeoutError`` after ``timeout`` s."""
        key = (host, port)
        lookup = self._join(key)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(lookup.answer), timeout)
        finally:
            self._leave(key, lookup)

    def lookup(self, host: str, port: int, timeout: float) -> Sequence[Any]:
        """``getaddrinfo`` for a caller off any event loop (a pool thread); the same
        shared lookups, ``TimeoutError`` after ``timeout`` s."""
        key = (host, port)
        lookup = self._join(key)
        try:
            return lookup.answer.result(timeout)
        finally:
            self._leave(key, lookup)

    def _join(self, key: HostKey) -> _Lookup:
        with self._lock:
            lookup = self._lookups.get(key)
            if lookup is None:
                lookup = self._lookups[key] = _Lookup()
                # Running from the start: one caller giving up cannot cancel a shared answer.
                lookup.answer.set_running_or_notify_cancel()
                self._queued.append(key)
                if self._threads < self._max_threads:
                    self._start_thread(key)
            lookup.waiting += 1
            return lookup

    def _start_thread(self, key: HostKey) -> None:
        """Start one more thread (the lock held); ``OSError`` if the process can't."""
        try:
            threading.Thread(target=self._work, name="lookup", daemon=True).start()
        except RuntimeError as e:  # "can't start new thread": out of threads or memory
            self._queued.remove(key)
            del self._lookups[key]
            raise OSError(f"no thread to look {key[0]!r} up in ({e})") from e
        self._threads += 1

    def _leave(self, key: HostKey, lookup: _Lookup) -> None:
        with self._lock:
            lookup.waiting -= 1
            if lookup.waiting == 0 and key in self._queued and self._lookups.get(key) is lookup:
                self._queued.remove(key)
                del self._lookups[key]

    def _work(self) -> None:
        while (taken := self._next()) is not None:
            key, lookup = taken
            try:
                found = self._getaddrinfo(*key, type=socket.SOCK_STREAM)
            except Exception as e:
                self._forget(key)
                lookup.answer.set_exception(e)
            else:
                self._forget(key)
                lookup.answer.set_result(found)

    def _next(self) -> tuple[HostKey, _Lookup] | None:
        """The next queued lookup, or None (and this thread ends) when there is none."""
        with self._lock:
            if not self._queued:
                self._threads -= 1
                return None
            key = self._queued.popleft()
            return key, self._lookups[key]

    def _forget(self, key: HostKey) -> None:
        # Before the answer is set: a caller arriving after it starts a fresh lookup.
        with self._lock:
            del self._lookups[key]
