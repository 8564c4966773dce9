"""The rescue store contract, which ``MySqlRescueStore`` and ``MemoryStore`` keep.

What the rescue reads of the workers (gone, draining) and of what is QUEUED on one, and
the writes that forget a worker or move its executions. ``unmark_queued`` is held by the
dispatch store contract. Row locks are not: the memory store has no other transaction
(tests/integration/test_held_rows.py holds MySQL to passing over held rows).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.db.executions import NewExecution
from common.states import ExecutionStatus, WorkerState
from tests.contracts.store_harness import NOW, StoreHarness

QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED


class RescueStoreContract(StoreHarness):
    """What every rescue store does, call by call."""

    def queued_on(self, job_id: int, worker_id: str, *execution_ids: str, at: int = 2_000) -> None:
        """QUEUED attempts 1, 2, ... of ``job_id``'s trigger at ``at``, on ``worker_id``."""
        rows = [NewExecution(e, job_id, n, at, 2_000) for n, e in enumerate(execution_ids, 1)]
        self.store.insert_executions([r.queued_on(worker_id) for r in rows], 2_000)

    # gone_workers and draining_workers

    def test_gone_workers_stopped_or_silent_longest_gone_first_not_the_forgotten(self) -> None:
        self.a_worker("stopped", 8_000, WorkerState.STOPPED)
        self.a_worker("silent", 1_000)
        self.a_worker("silent-draining", 500, WorkerState.DRAINING)
        self.a_worker("fresh", 9_000)
        self.a_worker("forgotten", 100, WorkerState.FORGOTTEN)
        gone = self.rescue_store.gone_workers(5_000)
        assert [w.worker_id for w in gone] == ["silent-draining", "silent", "stopped"]
        assert gone[1] == self.worker("silent")
        assert gone[1].handlers == ("demo.noop",)
        assert self.rescue_store.gone_workers(100) == [self.worker("stopped")]

    def test_draining_workers_are_those_heard_since_the_cut_off(self) -> None:
        self.a_worker("draining", 6_000, WorkerState.DRAINING)
        self.a_worker("draining-silent", 1_000, WorkerState.DRAINING)
        self.a_worker("active", 7_000)
        assert self.rescue_store.draining_workers(5_000) == [self.worker("draining")]
        assert self.rescue_store.draining_workers(9_000) == []

    # forget_worker_unless_held

    def test_a_worker_is_forgotten_only_when_long_gone_with_nothing_queued(self) -> None:
        job = self.a_job()
        self.a_worker("busy", 1_000)
        self.a_worker("free", 1_000)
        self.a_worker("recent", 6_000)
        self.queued_on(job, "busy", "e1")
        self.runs(job, ("e-done", ExecutionStatus.SUCCEEDED))  # on w1, ended
        assert not self.rescue_store.forget_worker_unless_held("busy", 5_000)
        assert not self.rescue_store.forget_worker_unless_held("recent", 5_000)
        assert not self.rescue_store.forget_worker_unless_held("nobody", 5_000)
        before = self.worker("free")
        assert self.rescue_store.forget_worker_unless_held("free", 5_000)
        assert self.worker("free") == replace(before, state=WorkerState.FORGOTTEN)
        assert not self.rescue_store.forget_worker_unless_held("free", 5_000), "once"
        assert [w.worker_id for w in self.rescue_store.gone_workers(5_000)] == ["busy"]
        assert self.worker("busy").state is WorkerState.ACTIVE
        self.a_worker("free", 9_000)  # it comes back
        assert self.worker("free").state is WorkerState.ACTIVE

    def test_a_forget_undone_with_its_transaction_leaves_the_worker_as_it_was(self) -> None:
        self.a_worker("free", 1_000)
        with pytest.raises(RuntimeError), self.undone_on_error():
            assert self.rescue_store.forget_worker_unless_held("free", 5_000)
            raise RuntimeError("the queue delete failed")
        assert self.worker("free").state is WorkerState.ACTIVE

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
