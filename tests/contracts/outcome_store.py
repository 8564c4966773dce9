"""The outcome store contract, which ``MySqlOutcomeStore`` and ``MemoryStore`` keep.

A subclass gives the store on an empty database (or a new ``MemoryStore``) through
``StoreHarness``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from sqlalchemy.exc import IntegrityError

from common.db.deliveries import JobLabel, NewDelivery
from common.db.executions import LockedExecution, NewExecution, Outcome
from common.db.jobs import TriggerSettings
from common.db.retry import is_duplicate_key
from common.memory.rows import MemoryDelivery, MemoryExecution
from common.states import DeliveryStatus, ExecutionStatus, JobStatus
from tests.contracts.store_harness import NOW, StoreHarness

DONE = ExecutionStatus.SUCCEEDED


class OutcomeStoreContract(StoreHarness):
    """What every outcome store does, call by call."""

    # lock_unfinished

    def test_lock_unfinished_returns_the_unfinished_by_key_in_key_order(self) -> None:
        job = self.a_job()
        queued = ExecutionStatus.QUEUED
        scheduled = ExecutionStatus.SCHEDULED
        k = self.runs(job, ("e1", queued), ("e2", DONE), ("e3", scheduled))
        got = self.store.lock_unfinished({"e3": k[2], "e1": k[0], "e2": k[1]})
        assert got == [self.locked("e1"), self.locked("e3")]
        assert got[0] == LockedExecution(k[0], "e1", job, 1, 1_000, queued, False)

    def test_lock_unfinished_returns_a_runs_own_params_for_its_retry(self) -> None:
        job = self.a_job()
        own = NewExecution("own", job, 1, 1_000, 1_000, ExecutionStatus.QUEUED, params='{"a":1}')
        self.store.insert_executions([own], 1_000)
        [got] = self.store.lock_unfinished({"own": None})
        assert (got.execution_id, got.params) == ("own", '{"a":1}')

    def test_lock_unfinished_looks_up_ids_without_a_key(self) -> None:
        job = self.a_job()
        k = self.runs(job, ("e1", ExecutionStatus.QUEUED), ("e2", ExecutionStatus.QUEUED))
        got = self.store.lock_unfinished({"e2": None, "e1": k[0]})
        assert got == [self.locked("e1"), self.locked("e2")]

    def test_lock_unfinished_finds_a_stale_key_by_execution_id_after_the_rest(self) -> None:
        job = self.a_job()
        k = self.runs(job, ("e1", ExecutionStatus.QUEUED), ("e2", ExecutionStatus.QUEUED))
        got = self.store.lock_unfinished({"e1": k[1] + 1_000, "e2": k[1]})
        assert got == [self.locked("e2"), self.locked("e1")]

    def test_lock_unfinished_with_a_key_of_another_row_returns_both(self) -> None:
        # e2's result carries e1's key (a key a rolled-back claim handed out): e1 is
        # locked by the key, e2 by its id after it; recording matches by id.
        job = self.a_job()
        k = self.runs(job, ("e1", ExecutionStatus.QUEUED), ("e2", ExecutionStatus.QUEUED))
        assert self.store.lock_unfinished({"e2": k[0]}) == [self.locked("e1"), self.locked("e2")]

    def test_lock_unfinished_skips_what_is_unknown_or_final(self) -> None:
        job = self.a_job()
        k = self.runs(job, ("e1", DONE))
        assert self.store.lock_unfinished({}) == []
        assert self.store.lock_unfinished({"nope": None, "gone": 9_999, "e1": k[0]}) == []

    # trigger_settings and job_labels

    def test_trigger_settings_of_each_job_that_exists(self) -> None:
        plain = self.a_job(callback_url="http://h/cb", max_retries=2, retry_backoff_seconds=3)
        cron = self.a_job(recurring=True, next_trigger_time=60_000, status=JobStatus.WAITING)
        got = self.store.trigger_settings([cron, plain, plain, 9_999])
        # The app's public id is the store's own (MySQL's apps row; memory's policies).
        assert {s.app_id for s in got.values()} == {got[plain].app_id}
        got = {key: replace(settings, app_id="") for key, settings in got.items()}
        assert got == {
            plain: TriggerSettings(
                plain, self.app_pk, JobStatus.RUNNING, False, False, "http://h/cb", 2, 3, 3600
            ),
            cron: TriggerSettings(
                cron, self.app_pk, JobStatus.WAITING, True, True, None, 0, 10, 3600
            ),
        }
        assert self.store.trigger_settings([]) == {}

    def test_trigger_settings_give_no_more_retries_than_the_apps_limit(self) -> None:
        # A limit lowered after the jobs were stored binds them too.
        many = self.a_job(max_retries=50)
        few = self.a_job(max_retries=2)
        self.limit_retries(5)
        got = self.store.trigger_settings([many, few])
        assert (got[many].max_retries, got[few].max_retries) == (5, 2)

    def test_job_labels_of_each_job_that_exists(self) -> None:
        named = self.a_job(job_name="report", client_request_id="abc")
        bare = self.a_job(job_name="bare", client_request_id=None)
        got = self.store.job_labels([named, bare, 9_999])
        assert got == {named: JobLabel("report", "abc"), bare: JobLabel("bare", None)}
        assert self.store.job_labels([]) == {}

    # record_outcomes

    def test_record_outcomes_writes_the_outcome_and_keeps_the_identity(self) -> None:
        job = self.a_job()
        k = self.runs(job, ("e1", ExecutionStatus.QUEUED), ("e2", ExecutionStatus.QUEUED))
        before = self.execution("e1")
        locked = LockedExecution(k[0], "e1", job, 1, 1_000, ExecutionStatus.QUEUED, False)
        outcome = Outcome(locked, ExecutionStatus.FAILED, "w9", "boom", '{"a":1}', 2_000, 2_500)
        self.store.record_outcomes([outcome])
        self.store.record_outcomes([])
        after = self.execution("e1")
        assert after == dataclasses.replace(
            before,
            status=ExecutionStatus.FAILED,
            worker_id="w9",
            message="boom",
            result='{"a":1}',
            started_at=2_000,
            ended_at=2_500,
        )
        assert self.execution("e2").status is ExecutionStatus.QUEUED

    # insert_executions

    def test_insert_executions_writes_rows_by_status(self) -> None:
        job = self.a_job()
        rows = [
            NewExecution("s", job, 1, 1_000, 1_200),
            NewExecution("q", job, 2, 1_000, 1_200).queued_on("w1"),
            NewExecution("f", job, 3, 1_000, 1_200, ExecutionStatus.SKIPPED, "late", True),
        ]
        self.store.insert_executions(rows, NOW)
        self.store.insert_executions([], NOW)
        s, q, f = (self.execution(e) for e in ("s", "q", "f"))
        assert dataclasses.replace(s, id=0) == MemoryExecution(
            0, "s", job, 1, 1_000, 1_200, ExecutionStatus.SCHEDULED, created_at=NOW
        )
        assert (q.status, q.worker_id, q.dispatched_at, q.ended_at) == ("QUEUED", "w1", NOW, None)
        assert (f.status, f.message, f.manual, f.ended_at) == ("SKIPPED", "late", True, NOW)
        assert s.id < q.id < f.id

    def test_a_second_execution_of_a_trigger_and_attempt_is_refused_with_its_batch(self) -> None:
        job = self.a_job()
        self.runs(job, ("e1", ExecutionStatus.QUEUED))
        fresh = NewExecution("e9", job, 2, 1_000, 1_200)
        again = NewExecution("e2", job, 1, 1_000, 1_200)
        with pytest.raises(IntegrityError) as refused:
            self.store.insert_executions([fresh, again], NOW)
        assert is_duplicate_key(refused.value)
        with pytest.raises(KeyError):
            self.execution("e9")

    def test_the_same_execution_id_twice_is_refused(self) -> None:
        job = self.a_job()
        self.runs(job, ("e1", ExecutionStatus.QUEUED))
        with pytest.raises(IntegrityError) as refused:
            self.store.insert_executions([NewExecution("e1", job, 5, 1_000, 1_200)], NOW)
        assert is_duplicate_key(refused.value)
        twice = [NewExecution("e7", job, 6, 1_000, 1_200), NewExecution("e7", job, 7, 1, 1)]
        with pytest.raises(IntegrityError):
            self.store.insert_executions(twice, NOW)

    def test_a_manual_run_takes_a_slot_of_its_own(self) -> None:
        job = self.a_job()
        self.runs(job, ("e1", ExecutionStatus.QUEUED))
        manual = NewExecution("m1", job, 1, 1_000, 1_200, manual=True)
        self.store.insert_executions([manual], NOW)
        assert self.execution("m1").manual

    # release_jobs

    def test_release_jobs_ends_one_shot_jobs_unless_cancelled(self) -> None:
        running = self.a_job()
        paused = self.a_job(status=JobStatus.PAUSED)
        cancelled = self.a_job(status=JobStatus.CANCELLED)
        failed = self.a_job()
        ends = [
            (running, JobStatus.SUCCEEDED),
            (paused, JobStatus.SUCCEEDED),
            (cancelled, JobStatus.SUCCEEDED),
            (failed, JobStatus.FAILED),
        ]
        self.store.release_jobs(ends, NOW)
        got = {j: self.job(j) for j in (running, paused, cancelled, failed)}
        assert {j: r.status for j, r in got.items()} == {
            running: JobStatus.SUCCEEDED,
            paused: JobStatus.SUCCEEDED,
            cancelled: JobStatus.CANCELLED,
            failed: JobStatus.FAILED,
        }
        assert {(r.version, r.updated_at) for r in got.values()} == {(1, NOW)}

    def test_release_jobs_sends_recurring_jobs_back_to_waiting(self) -> None:
        running = self.a_job(recurring=True, next_trigger_time=60_000)
        paused = self.a_job(recurring=True, next_trigger_time=60_000, status=JobStatus.PAUSED)
        self.store.release_jobs([(running, None), (paused, None), (9_999, None)], NOW)
        self.store.release_jobs([], NOW)
        assert (self.job(running).status, self.job(running).version) == (JobStatus.WAITING, 1)
        assert (self.job(paused).status, self.job(paused).updated_at) == (JobStatus.PAUSED, NOW)

    # insert_deliveries

    def delivery(self, job_id: int, execution_id: str, delivery_id: str) -> NewDelivery:
        return NewDelivery(delivery_id, execution_id, job_id, self.app_pk, "http://h/cb", "{}")

    def test_insert_deliveries_records_them_pending(self) -> None:
        job = self.a_job()
        self.runs(job, ("e1", DONE), ("e2", DONE))
        rows = [self.delivery(job, "e1", "msg_1"), self.delivery(job, "e2", "msg_2")]
        self.store.insert_deliveries(rows, NOW)
        self.store.insert_deliveries([], NOW)
        pending = DeliveryStatus.PENDING
        assert self.deliveries() == [MemoryDelivery(r, pending, 0, NOW, NOW) for r in rows]

    def test_insert_deliveries_records_them_queued_when_told(self) -> None:
        job = self.a_job()
        self.runs(job, ("e1", DONE))
        row = self.delivery(job, "e1", "msg_1")
        self.store.insert_deliveries([row], NOW, DeliveryStatus.QUEUED)
        assert self.deliveries() == [MemoryDelivery(row, DeliveryStatus.QUEUED, 0, NOW, NOW)]
        assert self.store.jobs_with_callbacks_on_their_way([job]) == {job}

    def test_jobs_with_callbacks_on_their_way_are_those_with_one_unsettled(self) -> None:
        waiting, retrying, settled, none = (self.a_job() for _ in range(4))
        self.runs(waiting, ("e1", DONE))
        self.runs(retrying, ("e2", DONE))
        self.runs(settled, ("e3", DONE), ("e4", DONE))
        self.store.insert_deliveries(
            [
                self.delivery(waiting, "e1", "msg_1"),
                self.delivery(retrying, "e2", "msg_2"),
                self.delivery(settled, "e3", "msg_3"),
                self.delivery(settled, "e4", "msg_4"),
            ],
            NOW,
        )
        self.set_delivery_status("msg_2", DeliveryStatus.RETRYING)
        self.set_delivery_status("msg_3", DeliveryStatus.DELIVERED)
        self.set_delivery_status("msg_4", DeliveryStatus.DEAD)
        jobs = [waiting, retrying, settled, none, 9_999]
        assert self.store.jobs_with_callbacks_on_their_way(jobs) == {waiting, retrying}
        assert self.store.jobs_with_callbacks_on_their_way([]) == set()

    def test_a_second_delivery_of_an_execution_or_id_is_refused_with_its_batch(self) -> None:
        job = self.a_job()
        self.runs(job, ("e1", DONE), ("e2", DONE), ("e3", DONE))
        self.store.insert_deliveries([self.delivery(job, "e1", "msg_1")], NOW)
        for clash in (self.delivery(job, "e1", "msg_9"), self.delivery(job, "e3", "msg_1")):
            with pytest.raises(IntegrityError) as refused:
                self.store.insert_deliveries([self.delivery(job, "e2", "msg_2"), clash], NOW)
            assert is_duplicate_key(refused.value)
        assert [d.delivery.delivery_id for d in self.deliveries()] == ["msg_1"]
