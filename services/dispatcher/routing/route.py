"""Routing: each execution to a live worker that runs its handler, by the strategy.

The firer routes what is due, the rescue what it moves off a dead or draining worker,
and a claim what it finds already due (on its own copy of the worker view); all of them
choose through ``Router.choose`` and send through ``dispatch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from common.db.executions_with_job import ExecutionWithJob
from common.loadbalance import LiveWorkers, WorkerChooser, WorkerLoad
from services.dispatcher.routing.dispatch import Assignment

# The directory's own type, so that the rescue, which also counts consumers and deletes
# queues, reads a ``WorkerDirectory`` where the firer needs only ``LiveWorkers``.
Directory = TypeVar("Directory", bound=LiveWorkers, covariant=True)


class Router(Generic[Directory]):
    """Chooses a live worker for each execution; ``directory`` is its view of the workers."""

    def __init__(self, directory: Directory, chooser: WorkerChooser) -> None:
        self.directory = directory
        self._chooser = chooser

    def route(
        self, rows: Sequence[ExecutionWithJob], live: Sequence[WorkerLoad] | None = None
    ) -> list[tuple[ExecutionWithJob, Assignment | None]]:
        """Each row, in order, with its assignment to a live worker that runs its handler
        and has room; None where there is none. ``live``: the live workers as read before
        (read now when None)."""
        live = self.directory.live() if live is None else live
        return [(row, self.assign(row, live)) for row in rows]

    def assign(self, row: ExecutionWithJob, live: Sequence[WorkerLoad]) -> Assignment | None:
        """The row's assignment to a live worker that runs its handler and has room in its
        queue (the pick counted on that worker); None when there is none."""
        worker_id = self.choose(row.handler, live)
        return None if worker_id is None else Assignment.of(row, worker_id)

    def choose(self, handler: str, live: Sequence[WorkerLoad]) -> str | None:
        """The id of the live worker in ``live`` to run ``handler`` next, its pick counted
        there; None when no live worker that runs it has room in its queue."""
        worker = self._chooser.choose(live, handler)
        return None if worker is None else worker.worker_id
