"""The worker store contract, which ``MySqlWorkerStore`` and ``MemoryStore`` keep: the
workers table (heartbeats, live, gone and draining workers, forgetting and pruning one,
listings) and the executions QUEUED on each worker.

Row locks are not held to it: the memory store has no other transaction
(tests/integration/test_held_rows.py holds MySQL to passing over a held worker row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from common.db.executions import NewExecution
from common.db.workers import Heartbeat, WorkerRecord
from common.states import ExecutionStatus, WorkerState
from tests.contracts.store_harness import StoreHarness

BEAT = Heartbeat(
    "w1",
    "host-a",
    4242,
    8,
    3,
    70,
    120,
    ("demo.noop", "report.build"),
    WorkerState.ACTIVE,
    1_000,
    2_000,
    overrun=1,
    handler_ms={"report.build": 900, "demo.noop": 2},
)


class WorkerStoreContract(StoreHarness):
    """What every worker store does, call by call."""

    def queued_on(self, job_id: int, worker_id: str, *execution_ids: str, at: int = 2_000) -> None:
        """QUEUED attempts 1, 2, ... of ``job_id``'s trigger at ``at``, on ``worker_id``."""
        rows = [NewExecution(e, job_id, n, at, 2_000) for n, e in enumerate(execution_ids, 1)]
        self.store.insert_executions([r.queued_on(worker_id) for r in rows], 2_000)

    def ids(self, workers: Sequence[WorkerRecord]) -> list[str]:
        return [w.worker_id for w in workers]

    # upsert_heartbeat

    def test_a_heartbeat_is_kept_whole_and_the_next_one_replaces_it(self) -> None:
        self.worker_store.upsert_heartbeat(BEAT)
        w1 = self.worker("w1")
        assert (w1.hostname, w1.pid, w1.capacity, w1.active) == ("host-a", 4242, 8, 3)
        assert (w1.cpu_idle, w1.avg_ms, w1.overrun) == (70, 120, 1)
        assert (w1.handlers, w1.state) == (("demo.noop", "report.build"), WorkerState.ACTIVE)
        assert (w1.started_at, w1.last_heartbeat) == (1_000, 2_000)
        assert dict(w1.handler_ms) == {"demo.noop": 2, "report.build": 900}
        later = replace(BEAT, active=0, state=WorkerState.DRAINING, sent_at=3_000, handler_ms={})
        self.worker_store.upsert_heartbeat(later)
        w1 = self.worker("w1")
        assert (w1.active, w1.state, w1.last_heartbeat) == (0, WorkerState.DRAINING, 3_000)
        assert dict(w1.handler_ms) == {}
        assert self.worker_store.all_workers() == [w1]

    # fresh_workers, draining_workers, gone_workers

    def test_fresh_workers_are_the_active_ones_heard_since_the_cut_off(self) -> None:
        self.a_worker("b-fresh", 6_000)
        self.a_worker("a-fresh", 5_000)
        self.a_worker("silent", 4_999)
        self.a_worker("draining", 7_000, WorkerState.DRAINING)
        self.a_worker("stopped", 7_000, WorkerState.STOPPED)
        fresh = self.worker_store.fresh_workers(5_000)
        assert sorted(self.ids(fresh)) == ["a-fresh", "b-fresh"]
        assert self.worker("a-fresh") in fresh
        assert self.worker_store.fresh_workers(9_000) == []

    def test_draining_workers_are_those_heard_since_the_cut_off(self) -> None:
        self.a_worker("draining", 6_000, WorkerState.DRAINING)
        self.a_worker("draining-silent", 1_000, WorkerState.DRAINING)
        self.a_worker("active", 7_000)
        assert self.worker_store.draining_workers(5_000) == [self.worker("draining")]
        assert self.worker_store.draining_workers(9_000) == []

    def test_gone_workers_stopped_or_silent_longest_gone_first_not_the_forgotten(self) -> None:
        self.a_worker("stopped", 8_000, WorkerState.STOPPED)
        self.a_worker("silent", 1_000)
        self.a_worker("silent-draining", 500, WorkerState.DRAINING)
        self.a_worker("fresh", 9_000)
        self.a_worker("forgotten", 100, WorkerState.FORGOTTEN)
        gone = self.worker_store.gone_workers(5_000)
        assert self.ids(gone) == ["silent-draining", "silent", "stopped"]
        assert gone[1] == self.worker("silent")
        assert gone[1].handlers == ("demo.noop",)
        assert self.worker_store.gone_workers(100) == [self.worker("stopped")]

    # forget_worker_unless_held

    def test_a_worker_is_forgotten_only_when_long_gone_with_nothing_queued(self) -> None:
        job = self.a_job()
        self.a_worker("busy", 1_000)
        self.a_worker("free", 1_000)
        self.a_worker("recent", 6_000)
        self.queued_on(job, "busy", "e1")
        self.runs(job, ("e-done", ExecutionStatus.SUCCEEDED))  # on w1, ended
        assert not self.worker_store.forget_worker_unless_held("busy", 5_000)
        assert not self.worker_store.forget_worker_unless_held("recent", 5_000)
        assert not self.worker_store.forget_worker_unless_held("nobody", 5_000)
        before = self.worker("free")
        assert self.worker_store.forget_worker_unless_held("free", 5_000)
        assert self.worker("free") == replace(before, state=WorkerState.FORGOTTEN)
        assert not self.worker_store.forget_worker_unless_held("free", 5_000), "once"
        assert self.ids(self.worker_store.gone_workers(5_000)) == ["busy"]
        assert self.worker("busy").state is WorkerState.ACTIVE
        self.a_worker("free", 9_000)  # it comes back
        assert self.worker("free").state is WorkerState.ACTIVE

    def test_a_forget_undone_with_its_transaction_leaves_the_worker_as_it_was(self) -> None:
        self.a_worker("free", 1_000)
        with pytest.raises(RuntimeError), self.undone_on_error():
            assert self.worker_store.forget_worker_unless_held("free", 5_000)
            raise RuntimeError("the queue delete failed")
        assert self.worker("free").state is WorkerState.ACTIVE

    # all_workers, registered_handlers, queued_by_worker

    def test_all_workers_by_id_whatever_their_state(self) -> None:
        assert self.worker_store.all_workers() == []
        self.a_worker("w2", 1_000, WorkerState.FORGOTTEN)
        self.a_worker("w1", 9_000)
        self.a_worker("w3", 5_000, WorkerState.STOPPED)
        workers = self.worker_store.all_workers()
        assert workers == [self.worker("w1"), self.worker("w2"), self.worker("w3")]

    def test_registered_handlers_are_every_workers_forgotten_or_not(self) -> None:
        assert self.worker_store.registered_handlers() == set()
        self.worker_store.upsert_heartbeat(BEAT)
        self.a_worker("old", 100, WorkerState.FORGOTTEN)
        assert self.worker_store.registered_handlers() == {"demo.noop", "report.build"}

    def test_queued_by_worker_counts_only_what_is_queued_on_each(self) -> None:
        assert self.worker_store.queued_by_worker() == {}
        job = self.a_job()
        self.queued_on(job, "w1", "a", "b")
        self.queued_on(job, "w2", "c", at=3_000)
        self.runs(job, ("done", ExecutionStatus.SUCCEEDED), ("due", ExecutionStatus.SCHEDULED))
        assert self.worker_store.queued_by_worker() == {"w1": 2, "w2": 1}

    # prune_forgotten

    def test_prune_forgotten_deletes_forgotten_workers_heard_before_the_cut_off(self) -> None:
        self.a_worker("old-1", 100, WorkerState.FORGOTTEN)
        self.a_worker("old-2", 200, WorkerState.FORGOTTEN)
        self.a_worker("recent", 900, WorkerState.FORGOTTEN)
        self.a_worker("stopped", 100, WorkerState.STOPPED)
        first = self.worker_store.prune_forgotten(500, 1)
        assert len(first) == 1
        rest = self.worker_store.prune_forgotten(500, 10)
        assert sorted(first + rest) == ["old-1", "old-2"]
        assert self.worker_store.prune_forgotten(500, 10) == []
        assert self.ids(self.worker_store.all_workers()) == ["recent", "stopped"]
