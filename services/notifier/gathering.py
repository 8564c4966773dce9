"""Calls from many posting threads served together, one store round trip for a burst.

The posting threads each read a delivery before its POST and record an attempt after
it. A thread that finds no batch being served serves every call waiting then (its own
and those of the threads that came while the last batch ran) in one go; the others
wait for its answer. One thread alone still pays one round trip, never a timer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")


class _Call(Generic[K, R]):
    """One thread's call: its key, and once served, its answer or the batch's error."""

    __slots__ = ("done", "error", "key", "result")

    def __init__(self, key: K) -> None:
        self.key = key
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class Gathered(Generic[K, R]):
    """``call(key)`` from any thread: ``serve(keys)`` runs for the keys gathered, at
    most ``most`` at a time, one batch at a time, and gives one answer per key in
    their order. An error of ``serve`` is raised in every thread of its batch."""

    def __init__(self, serve: Callable[[Sequence[K]], Sequence[R]], most: int = 64) -> None:
        self._serve = serve
        self._most = most
        self._changed = threading.Condition()
        self._waiting: list[_Call[K, R]] = []
        self._serving = False

    def call(self, key: K) -> R:
        """The answer for ``key``, served with the calls gathered by then."""
        mine: _Call[K, R] = _Call(key)
        with self._changed:
            self._waiting.append(mine)
        while True:
            with self._changed:
                while self._serving and not mine.done:
                    self._changed.wait()
                if mine.done:
                    break
                self._serving = True
                batch = self._waiting[: self._most]
                del self._waiting[: self._most]
            self._serve_batch(batch)
        if mine.error is not None:
            raise mine.error
        return mine.result  # type: ignore[return-value]  # set when served without error

    def _serve_batch(self, batch: list[_Call[K, R]]) -> None:
        try:
            results = self._serve([call.key for call in batch])
            for call, result in zip(batch, results, strict=True):
                call.result = result
        except BaseException as e:
            for call in batch:
                call.error = e
        finally:
            with self._changed:
                for call in batch:
                    call.done = True
                self._serving = False
                self._changed.notify_all()
