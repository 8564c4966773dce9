"""A firer on the in-memory store, broker and worker view, on a clock the test moves:
the stage the unit tests of firing run on."""

from __future__ import annotations

from dataclasses import dataclass

from common.db.executions import NewExecution
from common.loadbalance import WorkerChooser
from common.memory.broker import MemoryBroker, MemoryPublisher
from common.memory.live_workers import MemoryWorkers
from common.memory.rows import MemoryExecution, MemoryJob
from common.memory.started_marks import MemoryStartedMarks
from common.memory.store import MemoryStore
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.routing.route import Router
from services.dispatcher.trigger.fire import Firer, FireSettings
from tests.unit.fire_books import fire_books_problems

NOW = 1_000_000
HOLD_MS = 5_000
NOOP = frozenset({"demo.noop"})


@dataclass
class Clock:
    """The cluster time, as the test moves it."""

    now: int = NOW

    def now_ms(self) -> int:
        """The time the test set."""
        return self.now


class Stage:
    """A firer on a memory store, broker and worker view, on a clock the test moves."""

    def __init__(
        self,
        fire_batch_size: int = 2_000,
        queue_bound: int | None = None,
        marks: MemoryStartedMarks | None = None,
    ) -> None:
        self.clock = Clock()
        self.store = MemoryStore()
        self.broker = MemoryBroker()
        declare_core(self.broker)
        self.publisher = MemoryPublisher(self.broker)
        self.workers = MemoryWorkers(self.clock, 60_000, self.store, self.broker, queue_bound)
        self.handlers: dict[str, frozenset[str]] = {}
        router = Router(self.workers, WorkerChooser())
        settings = FireSettings(1_000, 500, fire_batch_size, HOLD_MS)
        self.marks = marks
        self.firer = Firer(
            self.store, self.clock, self.publisher, router, settings, marks=self.marks
        )

    def worker_up(self, worker_id: str, handlers: frozenset[str] = NOOP) -> None:
        """A worker starts: its queue, its heartbeat, a consumer on its queue."""
        declare_worker_queue(self.broker, worker_id)
        self.workers.start(worker_id, handlers)
        self.handlers[worker_id] = handlers

    def job(self, **fields: object) -> int:
        """A job with these ``MemoryJob`` fields; its id."""
        return self.store.add_job(MemoryJob(**fields))  # type: ignore[arg-type]

    def due(
        self, job_id: int, execution_id: str, at: int = NOW, attempt: int = 1, manual: bool = False
    ) -> str:
        """A SCHEDULED execution of ``job_id``'s trigger at ``at``, due then."""
        row = NewExecution(execution_id, job_id, attempt, at, at, manual=manual)
        self.store.insert_executions([row], at)
        return execution_id

    def fire(self) -> int:
        """One pass of the dispatch loop's firing: load, then fire all that is due."""
        self.firer.load()
        sent = 0
        while fired := self.firer.fire_due():
            sent += fired
        return sent

    def row(self, execution_id: str) -> MemoryExecution:
        """The execution's row as the store holds it."""
        return self.store.execution(execution_id)

    def later(self, ms: int) -> None:
        """Move the clock on by ``ms``."""
        self.clock.now += ms

    def books(self) -> list[str]:
        """What does not add up after firing what is due now (tests/unit/fire_books.py)."""
        return fire_books_problems(self.store, self.broker, self.handlers, self.clock.now)
