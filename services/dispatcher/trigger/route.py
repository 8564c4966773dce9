"""Routing: each execution to a live worker that runs its handler, by the strategy.

The firer routes what is due, and the rescue what it moves off a dead or draining
worker; both send the assignments through ``dispatch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from common.db.sendable import ExecutionWithJob
from common.loadbalance import LiveWorkers, WorkerChooser, WorkerLoad
from services.dispatcher.trigger.dispatch import Assignment

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
        worker = self._chooser.choose(live, row.handler)
        return None if worker is None else Assignment.of(row, worker.worker_id)
