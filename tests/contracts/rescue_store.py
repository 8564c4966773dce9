"""The rescue store contract, which ``MySqlRescueStore`` and ``MemoryStore`` keep.

What the rescue reads of what is QUEUED on a worker, and the writes that move its
executions (the workers themselves: tests/contracts/worker_store.py). ``unmark_queued``
is held by the dispatch store contract. Row locks are not: the memory store has no
other transaction (tests/integration/test_held_rows.py holds MySQL to passing over held
rows).
"""

from __future__ import annotations

from dataclasses import replace

from common.db.executions import NewExecution
from common.states import ExecutionStatus
from tests.contracts.store_harness import NOW, StoreHarness

QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED


class RescueStoreContract(StoreHarness):
    """What every rescue store does, call by call."""

    def queued_on(self, job_id: int, worker_id: str, *execution_ids: str, at: int = 2_000) -> None:
        """QUEUED attempts 1, 2, ... of ``job_id``'s trigger at ``at``, on ``worker_id``."""
        rows = [NewExecution(e, job_id, n, at, 2_000) for n, e in enumerate(execution_ids, 1)]
        self.store.insert_executions([r.queued_on(worker_id) for r in rows], 2_000)

    # unfinished_on_worker

    def test_unfinished_on_worker_reads_what_is_queued_on_it_with_its_jobs_data(self) -> None:
        job = self.a_job(handler="report.build", params='{"day": 3}', timeout_seconds=30)
        self.queued_on(job, "dead", "q1", "q2")
        self.queued_on(job, "other", "elsewhere", at=3_000)
        self.runs(job, ("done", ExecutionStatus.SUCCEEDED))
        got = self.rescue_store.unfinished_on_worker("dead", 10)
        assert {r.execution_id for r in got} == {"q1", "q2"}
        q1 = next(r for r in got if r.execution_id == "q1")
        assert (q1.id, q1.job_id, q1.attempt, q1.status) == (
            self.execution("q1").id,
            job,
            1,
            QUEUED,
        )
        assert (q1.worker_id, q1.handler, q1.params) == ("dead", "report.build", '{"day": 3}')
        assert (q1.timeout_seconds, q1.dispatched_at, q1.scheduled_at) == (30, 2_000, 2_000)
        assert len(self.rescue_store.unfinished_on_worker("dead", 1)) == 1
        assert self.rescue_store.unfinished_on_worker("nobody", 10) == []

    # lock_queued_on, reassign, unassign

    def test_lock_queued_on_returns_those_still_queued_on_the_worker(self) -> None:
        job = self.a_job()
        self.queued_on(job, "dead", "q1", "q2")
        self.queued_on(job, "other", "elsewhere", at=3_000)
        self.runs(job, ("done", ExecutionStatus.SUCCEEDED))
        ids = ["q2", "elsewhere", "done", "missing", "q1"]
        assert self.rescue_store.lock_queued_on(ids, "dead") == {"q1", "q2"}
        assert self.rescue_store.lock_queued_on([], "dead") == set()

    def test_reassign_moves_a_queued_execution_dispatched_now(self) -> None:
        job = self.a_job()
        self.queued_on(job, "dead", "q1")
        self.runs(job, ("done", ExecutionStatus.SUCCEEDED))
        before = self.execution("q1")
        assert self.rescue_store.reassign("q1", "dead", "live", NOW)
        assert self.execution("q1") == replace(before, worker_id="live", dispatched_at=NOW)
        assert not self.rescue_store.reassign("q1", "dead", "live", NOW), "not on dead now"
        ended = self.execution("done")
        assert not self.rescue_store.reassign("done", "w1", "live", NOW)
        assert self.execution("done") == ended

    def test_unassign_gives_a_queued_execution_back_to_the_firer(self) -> None:
        job = self.a_job()
        self.queued_on(job, "dead", "q1")
        before = self.execution("q1")
        assert self.rescue_store.unassign("q1", "dead", "waiting: no worker", NOW)
        assert self.execution("q1") == replace(
            before,
            status=SCHEDULED,
            worker_id=None,
            dispatched_at=None,
            scheduled_at=NOW,
            message="waiting: no worker",
        )
        assert not self.rescue_store.unassign("q1", "dead", "again", NOW)
        assert self.execution("q1").message == "waiting: no worker"

    # newest_queued_on, recall

    def test_newest_queued_on_reads_the_end_of_a_workers_queue_first(self) -> None:
        job = self.a_job(handler="report.build")
        self.queued_on(job, "w", "first", at=2_000)
        self.queued_on(job, "w", "second", "third", at=3_000)
        self.queued_on(job, "other", "elsewhere", at=4_000)
        self.runs(job, ("done", ExecutionStatus.SUCCEEDED))
        got = self.rescue_store.newest_queued_on("w", 10)
        assert [r.execution_id for r in got] == ["third", "second", "first"]
        assert got[0].handler == "report.build"
        assert [r.execution_id for r in self.rescue_store.newest_queued_on("w", 2)] == [
            "third",
            "second",
        ]
        assert self.rescue_store.newest_queued_on("nobody", 10) == []

    def test_recall_gives_queued_executions_back_keeping_their_times(self) -> None:
        job = self.a_job()
        self.queued_on(job, "w", "q1", "q2")
        self.queued_on(job, "other", "elsewhere", at=3_000)
        self.runs(job, ("done", ExecutionStatus.SUCCEEDED))
        before = self.execution("q1")
        ids = ["q1", "q2", "elsewhere", "done", "missing"]
        assert self.rescue_store.recall(ids, "w", "waiting: a slot") == 2
        assert self.execution("q1") == replace(
            before, status=SCHEDULED, worker_id=None, message="waiting: a slot"
        )
        assert self.execution("q2").status is SCHEDULED
        assert self.execution("elsewhere").status is QUEUED
        assert self.execution("done").status is ExecutionStatus.SUCCEEDED
        assert self.rescue_store.recall(["q1"], "w", "again") == 0
        assert self.rescue_store.recall([], "w", "none") == 0
