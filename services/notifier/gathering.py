"""Calls from many attempts on the event loop served together, one store round trip for a burst.

Each attempt reads its delivery before its POST and records the attempt after it. An
attempt that finds no batch being served starts one: every call waiting then (its own
and those made while the last batch ran) is served in one go, in a store thread, so
the loop never waits for MySQL. One attempt alone still pays one round trip, never a
timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")


class Gathered(Generic[K, R]):
    """``await call(key)`` on one event loop: ``serve(keys)`` runs in ``executor`` for
    the keys gathered, at most ``most`` at a time, one batch at a time, and gives one
    answer per key in their order. An error of ``serve`` is raised in every caller of
    its batch."""

    def __init__(
        self, serve: Callable[[Sequence[K]], Sequence[R]], executor: Executor, most: int = 64
    ) -> None:
        self._serve = serve
        self._executor = executor
        self._most = most
        self._waiting: list[tuple[K, asyncio.Future[R]]] = []
        self._serving: asyncio.Task[None] | None = None

    async def call(self, key: K) -> R:
        """The answer for ``key``, served with the calls gathered by then."""
        return await self.start(key)

    def start(self, key: K) -> asyncio.Future[R]:
        """The future answer for ``key`` (on the loop), to await now or later."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[R] = loop.create_future()
        self._waiting.append((key, answer))
        if self._serving is None:
            self._serving = loop.create_task(self._serve_waiting())
        return answer

    async def _serve_waiting(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                batch = self._waiting[: self._most]
                del self._waiting[: self._most]
                keys = [key for key, _ in batch]
                try:
                    results = await loop.run_in_executor(self._executor, self._serve, keys)
                except Exception as e:
                    for _, answer in batch:
                        if not answer.done():
                            answer.set_exception(e)
                    continue
                for (_, answer), result in zip(batch, results, strict=True):
                    if not answer.done():  # its caller may have been cancelled
                        answer.set_result(result)
        finally:
            self._serving = None
