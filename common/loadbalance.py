"""Choosing the worker for an execution: equal-cost load score, round-robin or random."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class Strategy(StrEnum):
    """How the dispatcher spreads executions over workers."""

    EQUAL_COST = "equal_cost"
    ROUND_ROBIN = "round_robin"
    RANDOM = "random"


# A worker's room when nothing bounds its queue.
UNBOUNDED = 1 << 30


@dataclass
class WorkerLoad:
    """What the dispatcher knows of one live worker's load right now; ``room`` is how
    many more places its queue has (``common.slots``), ``costs`` how many places a run
    of each handler takes there (one when not named), each standing for ``unit_ms`` of
    run time."""

    worker_id: str
    active: int
    avg_ms: float
    cpu_idle: float
    handlers: frozenset[str]
    room: int = UNBOUNDED
    costs: Mapping[str, int] = field(default_factory=dict)
    unit_ms: float = 0.0
    # The places its queue may hold, and the executions QUEUED on it (in its queue or
    # running) when the view was read.
    bound: int = UNBOUNDED
    queued: int = 0
    # Executions chosen for it since the view was read (what the turnover counts as sent),
    # and the places they take beyond one each.
    picked: int = 0
    picked_extra: int = 0


class LiveWorkers(Protocol):
    """What routing needs of a view of the workers: the live ones, with their load
    (``WorkerDirectory`` on MySQL and RabbitMQ, ``MemoryWorkers`` in unit tests)."""

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        """The live workers with their load, fresh for at least ``fresh_for`` seconds."""
        ...


class WorkerQueues(LiveWorkers, Protocol):
    """What the rescue needs besides the live workers: the consumers on a worker's queue,
    and deleting the queue of one long gone (``WorkerDirectory`` on RabbitMQ,
    ``MemoryWorkers`` on the memory broker)."""

    def consumer_count(self, worker_id: str) -> int:
        """Consumers on the worker's queue; 0 if it has no queue."""
        ...

    def delete_queue(self, worker_id: str) -> bool:
        """Delete the worker's queue unless a consumer is on it; whether it is gone."""
        ...


def load_score(worker: WorkerLoad) -> float:
    """The classic equal-cost score: lower is less loaded."""
    return worker.active * 10 + worker.avg_ms / 1000 + (100 - worker.cpu_idle) / 10


class WorkerChooser:
    """Picks a worker per execution and counts each pick as one more active task."""

    def __init__(self, strategy: Strategy = Strategy.EQUAL_COST, seed: int | None = None) -> None:
        self._strategy = strategy
        self._turn = 0
        self._random = random.Random(seed)

    def choose(self, workers: Sequence[WorkerLoad], handler: str) -> WorkerLoad | None:
        """The worker to run ``handler`` next, or None when no live worker that registers
        it has room in its queue (``runs`` tells the two apart)."""
        able = [w for w in workers if handler in w.handlers and w.room > 0]
        if not able:
            return None
        chosen = self._pick(able)
        # A slow run may take more places than are left: one with any room goes, so a
        # worker of quick runs never refuses a slow one for good.
        cost = chosen.costs.get(handler, 1)
        chosen.active += 1
        chosen.room -= cost
        chosen.picked += 1
        chosen.picked_extra += cost - 1
        return chosen

    def _pick(self, able: list[WorkerLoad]) -> WorkerLoad:
        if self._strategy is Strategy.ROUND_ROBIN:
            self._turn += 1
            return sorted(able, key=lambda w: w.worker_id)[self._turn % len(able)]
        if self._strategy is Strategy.RANDOM:
            return self._random.choice(able)
        return min(able, key=lambda w: (load_score(w), w.worker_id))


def runs(workers: Sequence[WorkerLoad], handler: str) -> bool:
    """Whether some live worker registers ``handler``, room or not."""
    return any(handler in w.handlers for w in workers)
