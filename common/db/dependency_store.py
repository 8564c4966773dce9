"""The store as judging a child's run sees it: its parents, and what it waited for.

``DependencyStore`` is the part of the firer's store (``common.db.fire_store``) and of
the results path's (``common.db.outcome_store``) that reads a child run's parents and
writes the parent runs it waited for: the firer writes them when it sends the run, the
results path when the fire that sent it never committed. ``MySqlDependencyStore`` passes
each call to ``common.db.job_dependencies`` on the caller's connection;
``common.memory.store.MemoryStore`` keeps the same contract in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from sqlalchemy.engine import Connection

from common.db import job_dependencies
from common.dependencies import ChildRun, Edge, ParentRun


class DependencyStore(Protocol):
    """What judging child runs reads and writes, inside the caller's transaction."""

    def parents_of_runs(self, children: Sequence[ChildRun]) -> tuple[list[Edge], list[ParentRun]]:
        """The edges of these child runs' jobs, with their parents' state, and the parent
        runs they may wait for (``common.dependencies``)."""
        ...

    def record_waited_for(self, waited: Mapping[int, Sequence[ParentRun]]) -> None:
        """Write on each execution (by key) the parent runs it waited for."""
        ...


class MySqlDependencyStore:
    """``DependencyStore`` on the connection of the MySQL store it is mixed into."""

    __slots__ = ()
    _conn: Connection

    def parents_of_runs(self, children: Sequence[ChildRun]) -> tuple[list[Edge], list[ParentRun]]:
        """See ``job_dependencies.edges_for`` and ``job_dependencies.parent_runs``."""
        edges = job_dependencies.edges_for(self._conn, [c.job_id for c in children])
        return edges, job_dependencies.parent_runs(self._conn, children, edges)

    def record_waited_for(self, waited: Mapping[int, Sequence[ParentRun]]) -> None:
        """See ``job_dependencies.record_waited_for``."""
        job_dependencies.record_waited_for(self._conn, waited)
