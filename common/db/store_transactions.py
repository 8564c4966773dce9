"""Where a stage gets its store: a plain read, or a transaction.

``StoreTransactions`` is that port for any store (``WorkerTransactions``,
``FireTransactions``, ``RescueTransactions`` name it for theirs). Each MySQL store
(``MySqlWorkerStore``, ``MySqlFireStore``, ``MySqlRescueStore``) is a thin object over
one connection whose transaction its caller holds; ``EngineStores`` hands one out per
connection of an engine, as ``MemoryStore.reading`` and ``transaction`` hand out the
in-memory twin.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from sqlalchemy.engine import Connection, Engine

S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)


class StoreTransactions(Protocol[S_co]):
    """Where a stage gets its store: a plain read, or a transaction."""

    def reading(self) -> AbstractContextManager[S_co]:
        """The store for reads outside a transaction (``engine.connect()``)."""
        ...

    def transaction(self) -> AbstractContextManager[S_co]:
        """The store in a transaction committed on leaving, rolled back if it raises
        (``engine.begin()``)."""
        ...


class EngineStores(Generic[S]):
    """``reading`` and ``transaction`` on an engine, each yielding ``make(connection)``."""

    __slots__ = ("_engine", "_make")

    def __init__(self, engine: Engine, make: Callable[[Connection], S]) -> None:
        self._engine = engine
        self._make = make

    def reading(self) -> AbstractContextManager[S]:
        """The store on a connection without a transaction of its own, closed on leaving
        (``engine.connect()``)."""
        return self._on(self._engine.connect())

    def transaction(self) -> AbstractContextManager[S]:
        """The store in a transaction committed on leaving, rolled back if it raises
        (``engine.begin()``)."""
        return self._on(self._engine.begin())

    @contextlib.contextmanager
    def _on(self, opened: AbstractContextManager[Connection]) -> Iterator[S]:
        with opened as conn:
            yield self._make(conn)
