"""A rescue on the in-memory store, broker, worker view and started marks, on a clock
the test moves: the stage the unit tests of rescue run on.

Workers the stage runs heartbeat whenever the clock moves; one that dies stops both
heartbeats and consuming, one that hangs stops heartbeats only. After each sweep the
results the rescue published are recorded into the store, as the results consumer
would record them before the next sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.db.executions import NewExecution
from common.loadbalance import WorkerChooser
from common.memory.broker import MemoryBroker, MemoryPublisher
from common.memory.live_workers import MemoryWorkers
from common.memory.rows import MemoryExecution, MemoryJob
from common.memory.started_marks import MemoryStartedMarks
from common.memory.store import MemoryStore
from common.messages import ExecutionResult, ResultBatch
from common.states import ExecutionStatus, WorkerState
from common.topology import RESULTS_QUEUE, declare_core
from services.dispatcher.outcomes.recording import _record_in
from services.dispatcher.routing.dispatch import Assignment, pack_dispatches, send_packs
from services.dispatcher.routing.route import Router
from services.dispatcher.upkeep.rescue import Rescue, RescueSettings
from tests.unit.rescue_books import rescue_books_problems

NOW = 10_000_000
STALE_MS = 15_000
NOOP = frozenset({"demo.noop"})


@dataclass
class Clock:
    """The cluster time, as the test moves it."""

    now: int = NOW

    def now_ms(self) -> int:
        """The time the test set."""
        return self.now


@dataclass
class Running:
    """A worker the stage keeps heartbeating, and what it says of itself."""

    handlers: frozenset[str]
    state: WorkerState = WorkerState.ACTIVE


@dataclass
class Stage:
    """A rescue on memory stores, on a clock the test moves."""

    forget_ms: int = 0
    clock: Clock = field(default_factory=Clock)
    store: MemoryStore = field(default_factory=MemoryStore)
    broker: MemoryBroker = field(default_factory=MemoryBroker)
    marks: MemoryStartedMarks = field(default_factory=MemoryStartedMarks)
    running: dict[str, Running] = field(default_factory=dict)
    handlers: dict[str, frozenset[str]] = field(default_factory=dict)
    reported: list[ExecutionResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        declare_core(self.broker)
        self.publisher = MemoryPublisher(self.broker)
        self.workers = MemoryWorkers(self.clock, STALE_MS, self.store, self.broker)
        # Redis has kept its keys since long before anything here was dispatched.
        self.marks.epoch(NOW - 3_600_000)
        router = Router(self.workers, WorkerChooser())
        settings = RescueSettings(STALE_MS, self.forget_ms)
        self.rescue = Rescue(
            self.store, self.store, self.marks, self.clock, self.publisher, router, settings
        )

    # Workers.

    def worker_up(self, worker_id: str, handlers: frozenset[str] = NOOP) -> None:
        """A worker starts: its heartbeat, its queue, a consumer on it."""
        self.workers.start(worker_id, handlers)
        self.running[worker_id] = Running(handlers)
        self.handlers[worker_id] = handlers

    def die(self, worker_id: str) -> None:
        """The worker goes: no more heartbeats, no consumer on its queue."""
        del self.running[worker_id]
        self.workers.set_consuming(worker_id, False)

    def hang(self, worker_id: str) -> None:
        """The worker stops heartbeating but its consumer stays on its queue."""
        del self.running[worker_id]

    def drain(self, worker_id: str) -> None:
        """The worker drains: it says DRAINING and stops consuming; its runs go on."""
        self.running[worker_id].state = WorkerState.DRAINING
        self.workers.set_consuming(worker_id, False)
        self.later(0)

    def later(self, ms: int) -> None:
        """Move the clock on; the running workers heartbeat then."""
        self.clock.now += ms
        for worker_id, w in self.running.items():
            self.workers.heartbeat(worker_id, w.handlers, state=w.state)

    # Executions.

    def queued_on(self, worker_id: str, execution_id: str, handler: str = "demo.noop") -> int:
        """An execution of a new job of ``handler``, dispatched to ``worker_id`` now (its
        message in the worker's queue); its job's id."""
        job = self.store.add_job(MemoryJob(job_name=execution_id, handler=handler))
        at = self.clock.now
        row = NewExecution(execution_id, job, 1, at, at).queued_on(worker_id)
        self.store.insert_executions([row], at)
        sent = self.row(execution_id).with_job(self.store.jobs[job])
        packs = pack_dispatches([Assignment.of(sent, worker_id)], at)
        assert send_packs(self.store, self.publisher, packs) == set()
        return job

    def took(self, execution_id: str) -> None:
        """The execution's worker admitted it: its started key names the worker."""
        row = self.row(execution_id)
        assert row.worker_id is not None
        self.marks.take(execution_id, row.worker_id)

    def ended(self, execution_id: str, status: ExecutionStatus) -> ExecutionResult:
        """The execution's worker ran it and stored how it ended, but did not report it."""
        row = self.row(execution_id)
        assert row.worker_id is not None
        result = ExecutionResult(
            execution_id=execution_id,
            job_id=row.job_id,
            worker_id=row.worker_id,
            status=status,  # type: ignore[arg-type]
            started_at=self.clock.now - 20,
            ended_at=self.clock.now - 10,
        )
        self.marks.store_outcome(execution_id, row.worker_id, result.model_dump_json())
        return result

    def row(self, execution_id: str) -> MemoryExecution:
        """The execution's row as the store holds it."""
        return self.store.execution(execution_id)

    # Sweeping.

    def sweep(self) -> list[ExecutionResult]:
        """One upkeep pass of the rescue (dead workers, then draining ones); the results
        it published, recorded into the store."""
        self.rescue.rescue_dead_workers()
        self.rescue.move_off_draining_workers()
        return self.record()

    def record(self) -> list[ExecutionResult]:
        """Record what the results queue holds, as the results consumer does; those."""
        batches = self.broker.take(RESULTS_QUEUE)
        results = [r for m in batches for r in ResultBatch.model_validate_json(m.body).results]
        with self.store.transaction() as store:
            _record_in(store, self.clock, results)
        self.reported += results
        return results

    def books(self, may_stay: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """What does not add up after a sweep (tests/unit/rescue_books.py); ``may_stay``:
        executions left QUEUED on a worker that is not live by right."""
        live = {w.worker_id for w in self.workers.live()}
        handlers = {w: h for w, h in self.handlers.items() if w in live}
        return rescue_books_problems(self.store, self.broker, handlers, self.reported, may_stay)
