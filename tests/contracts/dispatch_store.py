"""The dispatch store contract, and transactions, which MySQL and ``MemoryStore`` keep."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.db.deliveries import NewDelivery
from common.db.executions import NewExecution
from common.states import ExecutionStatus, JobStatus
from tests.contracts.store_harness import NOW, StoreHarness

QUEUED = ExecutionStatus.QUEUED


class DispatchStoreContract(StoreHarness):
    """What every store does when sending puts executions back, and when a transaction
    goes back."""

    def test_unmark_queued_puts_executions_back_to_scheduled(self) -> None:
        job = self.a_job()
        k = self.runs(job, ("e1", QUEUED), ("e2", QUEUED), ("e3", QUEUED))
        before = self.execution("e1")
        self.dispatch_store.unmark_queued([k[2], k[0], k[0]])
        self.dispatch_store.unmark_queued([])
        back = self.execution("e1")
        scheduled = ExecutionStatus.SCHEDULED
        assert back == replace(before, status=scheduled, worker_id=None, dispatched_at=None)
        assert self.execution("e3").status is ExecutionStatus.SCHEDULED
        assert (self.execution("e2").status, self.execution("e2").worker_id) == (QUEUED, "w1")

    def test_mark_queued_marks_only_what_is_still_scheduled(self) -> None:
        job = self.a_job()
        scheduled = ExecutionStatus.SCHEDULED
        k = self.runs(job, ("e1", scheduled), ("e2", QUEUED), ("e3", ExecutionStatus.FAILED))
        self.fire_store.mark_queued({k[0]: "w7", k[1]: "w7", k[2]: "w7"}, NOW)
        e1, e2, e3 = (self.execution(e) for e in ("e1", "e2", "e3"))
        assert (e1.status, e1.worker_id, e1.dispatched_at, e1.message) == (QUEUED, "w7", NOW, None)
        assert (e2.status, e2.worker_id, e2.dispatched_at) == (QUEUED, "w1", 1_500)
        assert (e3.status, e3.worker_id) == (ExecutionStatus.FAILED, "w1")

    def test_a_transaction_that_raises_leaves_nothing_of_it(self) -> None:
        job = self.a_job(callback_url="http://h/cb")
        k = self.runs(job, ("e1", QUEUED))
        delivery = NewDelivery("msg_1", "e1", job, self.app_pk, "http://h/cb", "{}")
        with pytest.raises(RuntimeError), self.undone_on_error():
            self.store.insert_executions([NewExecution("e2", job, 2, 1_000, 1_200)], NOW)
            self.dispatch_store.unmark_queued([k[0]])
            self.store.release_jobs([(job, JobStatus.SUCCEEDED)], NOW)
            self.store.insert_deliveries([delivery], NOW)
            raise RuntimeError("the publish failed")
        assert (self.execution("e1").status, self.execution("e1").worker_id) == (QUEUED, "w1")
        with pytest.raises(KeyError):
            self.execution("e2")
        assert (self.job(job).status, self.job(job).version) == (JobStatus.RUNNING, 0)
        assert self.deliveries() == []
