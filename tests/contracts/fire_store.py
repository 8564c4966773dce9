"""The fire store contract, which ``MySqlFireStore`` and ``MemoryStore`` keep.

What firing reads (due executions with their job's data, which of them are still
SCHEDULED, which jobs have a run going) and the writes that settle a due batch (skip,
cancel, hold). ``mark_queued`` and ``unmark_queued`` are held by the dispatch store
contract, ``release_jobs`` by the outcome store contract.
"""

from __future__ import annotations

import json
from dataclasses import replace

from common.db.apps import DEFAULT_POLICY
from common.db.executions import NewExecution
from common.db.executions_with_job import ExecutionWithJob
from common.db.job_dependencies import After
from common.dependencies import HELD_FOR_PARENTS, ChildRun, DependOn, ParentRun, matching_run
from common.schedule import MisfirePolicy, OverlapPolicy
from common.states import ExecutionStatus, JobStatus
from tests.contracts.store_harness import NOW, StoreHarness

SCHEDULED = ExecutionStatus.SCHEDULED
QUEUED = ExecutionStatus.QUEUED


class FireStoreContract(StoreHarness):
    """What every fire store does, call by call."""

    def due(self, job_id: int, *specs: tuple[str, int]) -> list[int]:
        """SCHEDULED first attempts of ``job_id`` (execution id, scheduled at); their keys."""
        rows = [NewExecution(e, job_id, 1, 1_000 + at, at) for e, at in specs]
        self.store.insert_executions(rows, 1_000)
        return [self.execution(e).id for e, _ in specs]

    # scheduled_until

    def test_scheduled_until_reads_the_due_soonest_first_with_their_jobs_data(self) -> None:
        cron = self.a_job(
            recurring=True,
            next_trigger_time=90_000,
            status=JobStatus.WAITING,
            handler="report.build",
            params='{"day": 3}',
            timeout_seconds=30,
            overlap_policy=OverlapPolicy.QUEUE,
            misfire_policy=MisfirePolicy.SKIP,
            misfire_threshold_seconds=5,
        )
        plain = self.a_job()
        [late, soon] = self.due(cron, ("late", 4_000), ("soon", 2_000))
        self.due(plain, ("first", 1_000), ("after", 9_000))
        got = self.fire_store.scheduled_until(4_000, 10)
        assert [r.execution_id for r in got] == ["first", "soon", "late"]
        assert got[1] == ExecutionWithJob(
            soon, "soon", cron, 1, 3_000, 2_000, None, SCHEDULED, False,
            "report.build", '{"day": 3}', 30, "QUEUE", "SKIP", 5, 90_000,
            JobStatus.WAITING, True, None, self.app_pk, 5, False,
        )  # fmt: skip
        first = got[0]
        assert (first.handler, first.params, first.timeout_seconds) == ("demo.noop", "{}", None)
        assert (first.overlap_policy, first.misfire_policy) == ("FORBID", "FIRE_ONCE")
        assert (first.misfire_threshold_seconds, first.recurring) == (60, False)
        assert (first.job_status, first.next_trigger_time) == (JobStatus.RUNNING, None)
        assert late in {r.id for r in got}

    def test_scheduled_until_reads_a_runs_own_params_in_place_of_the_jobs(self) -> None:
        job = self.a_job(params='{"job": 1}')
        own = NewExecution("own", job, 1, 1_000, 1_000, manual=True, params='{"run": 2}')
        plain = NewExecution("plain", job, 1, 1_001, 1_001, manual=True)
        self.store.insert_executions([own, plain], 1_000)
        got = {r.execution_id: r.params for r in self.fire_store.scheduled_until(2_000, 10)}
        assert got == {"own": '{"run": 2}', "plain": '{"job": 1}'}
        assert self.execution("plain").params is None

    def test_scheduled_until_reads_only_scheduled_rows_up_to_the_limit(self) -> None:
        job = self.a_job()
        self.due(job, ("a", 1_000), ("b", 2_000), ("c", 3_000))
        self.runs(job, ("q", QUEUED), ("d", ExecutionStatus.SUCCEEDED))  # scheduled at 1500
        assert [r.execution_id for r in self.fire_store.scheduled_until(5_000, 2)] == ["a", "b"]
        assert [r.execution_id for r in self.fire_store.scheduled_until(999, 10)] == []
        assert self.fire_store.scheduled_until(5_000, 0) == []

    def test_scheduled_until_reads_an_apps_first_runs_by_priority_with_aging(self) -> None:
        low, high = self.a_job(priority=1), self.a_job(priority=9)
        self.due(low, ("old-low", 1_000))
        self.due(high, ("high", 200_000), ("higher-later", 300_000))
        aging = 60_000
        # old-low: 1_000 - 60_000 = -59_000; high: 200_000 - 540_000 = -340_000; ...
        got = self.fire_store.scheduled_until(400_000, 2, aging)
        assert [r.execution_id for r in got] == ["high", "higher-later"]
        assert [r.priority for r in got] == [9, 9]
        got = self.fire_store.scheduled_until(400_000, 3, aging)
        assert [r.execution_id for r in got] == ["old-low", "high", "higher-later"]

    def test_mark_waiting_says_so_on_scheduled_rows_only(self) -> None:
        job = self.a_job()
        [a] = self.due(job, ("a", 1_000))
        [q] = self.runs(job, ("q", QUEUED))
        self.fire_store.mark_waiting([a, q])
        self.fire_store.mark_waiting([])
        assert [r.waited for r in self.fire_store.scheduled_until(5_000, 10)] == [True]
        assert self.execution("q").message is None
        self.fire_store.mark_queued({a: "w1"}, NOW)
        assert self.execution("a").message is None

    def test_running_by_app_counts_queued_runs(self) -> None:
        job, other = self.a_job(), self.a_job()
        self.runs(job, ("q1", QUEUED), ("q2", QUEUED), ("s", ExecutionStatus.SUCCEEDED))
        self.runs(other, ("q3", QUEUED))
        self.due(other, ("d", 1_000))
        assert self.fire_store.running_by_app() == {self.app_pk: 3}

    def test_app_policies_give_an_app_weight_one_and_no_cap_by_default(self) -> None:
        policy = self.fire_store.app_policies().get(self.app_pk, DEFAULT_POLICY)
        assert (policy.weight, policy.max_running, policy.disabled) == (1, None, False)

    # lock_still_scheduled

    def test_lock_still_scheduled_returns_the_keys_still_scheduled(self) -> None:
        job = self.a_job()
        [a, b] = self.due(job, ("a", 1_000), ("b", 2_000))
        [q] = self.runs(job, ("q", QUEUED))
        assert self.fire_store.lock_still_scheduled([b, q, a, 9_999]) == {a, b}
        assert self.fire_store.lock_still_scheduled([q, a], skip_locked=True) == {a}
        assert self.fire_store.lock_still_scheduled([]) == set()

    # jobs_with_runs and lock_free_jobs

    def test_jobs_with_runs_are_those_with_an_execution_queued(self) -> None:
        busy, idle, done = self.a_job(), self.a_job(), self.a_job()
        self.runs(busy, ("b1", ExecutionStatus.FAILED), ("b2", QUEUED))
        self.due(idle, ("i1", 1_000))
        self.runs(done, ("d1", ExecutionStatus.SUCCEEDED))
        assert self.fire_store.jobs_with_runs([idle, done, busy, busy, 9_999]) == {busy}
        assert self.fire_store.jobs_with_runs([]) == set()

    def test_jobs_with_own_runs_are_those_with_a_scheduled_trigger_not_ended(self) -> None:
        due, going, done, manual = self.a_job(), self.a_job(), self.a_job(), self.a_job()
        self.due(due, ("d1", 1_000))
        self.runs(going, ("g1", ExecutionStatus.FAILED), ("g2", QUEUED))
        self.runs(done, ("x1", ExecutionStatus.SUCCEEDED), ("x2", ExecutionStatus.SKIPPED))
        self.store.insert_executions([NewExecution("m1", manual, 1, 1_000, 1_000, manual=True)], 1)
        asked = [manual, done, going, due, due, 9_999]
        assert self.fire_store.jobs_with_own_runs(asked) == {due, going}
        assert self.fire_store.jobs_with_own_runs([]) == set()

    def test_lock_free_jobs_locks_the_jobs_that_exist(self) -> None:
        one, two = self.a_job(), self.a_job(status=JobStatus.PAUSED)
        assert self.fire_store.lock_free_jobs([two, one, one, 9_999]) == {one, two}
        assert self.fire_store.lock_free_jobs([]) == set()

    # mark_skipped

    def test_mark_skipped_ends_executions_with_their_reasons(self) -> None:
        job = self.a_job()
        [a, b, c] = self.due(job, ("a", 1_000), ("b", 2_000), ("c", 3_000))
        before = self.execution("a")
        self.fire_store.mark_skipped({a: "skipped: late", b: "paused"}, NOW)
        self.fire_store.mark_skipped({c: "cancelled"}, NOW, ExecutionStatus.CANCELLED)
        self.fire_store.mark_skipped({}, NOW)
        skipped = ExecutionStatus.SKIPPED
        assert self.execution("a") == replace(
            before, status=skipped, message="skipped: late", ended_at=NOW
        )
        assert (self.execution("b").status, self.execution("b").message) == (skipped, "paused")
        c_row = self.execution("c")
        assert (c_row.status, c_row.message, c_row.ended_at) == (
            ExecutionStatus.CANCELLED,
            "cancelled",
            NOW,
        )
        assert self.fire_store.scheduled_until(9_000, 10) == []

    # hold_scheduled

    def test_hold_scheduled_moves_the_time_on_and_says_why(self) -> None:
        job = self.a_job()
        [a, b] = self.due(job, ("a", 1_000), ("b", 2_000))
        before = self.execution("a")
        self.fire_store.hold_scheduled({a: "waiting: no worker"}, 7_000)
        self.fire_store.hold_scheduled({}, 7_000)
        assert self.execution("a") == replace(
            before, scheduled_at=7_000, message="waiting: no worker"
        )
        assert [r.execution_id for r in self.fire_store.scheduled_until(6_999, 10)] == ["b"]
        assert [r.execution_id for r in self.fire_store.scheduled_until(7_000, 10)] == ["b", "a"]
        self.fire_store.mark_queued({a: "w2", b: "w2"}, NOW)
        assert self.execution("a").message is None, "sent at last: the wait is over"
        assert self.fire_store.lock_still_scheduled([a, b]) == set()

    # parents_of_runs, record_waited_for

    def test_parents_of_runs_give_the_edges_and_the_runs_each_child_run_matches(self) -> None:
        once = self.a_job(status=JobStatus.SUCCEEDED)
        cron = self.a_job(recurring=True, next_trigger_time=9_000, status=JobStatus.WAITING)
        self.runs(once, ("o1", ExecutionStatus.FAILED))
        self.store.insert_executions([NewExecution("o2", once, 2, 1_000, 2_000)], 1_000)
        self.store.insert_executions(
            [NewExecution(f"c{t}", cron, 1, t, t) for t in (1_000, 2_000, 3_000)], 1_000
        )
        after = (After(once, DependOn.FINISHED), After(cron, DependOn.SUCCEEDED))
        child = self.a_job(recurring=True, after=after, created_at=1_500)
        lone = self.a_job(after=(After(cron, DependOn.SUCCEEDED),), created_at=1_500)
        children = [ChildRun(1, child, 2_000, True, 1_500), ChildRun(2, lone, 5_000, False, 1_500)]
        edges, runs = self.fire_store.parents_of_runs(children)
        assert sorted(
            (e.child_job_id, e.parent_job_id, e.on, e.parent_recurring) for e in edges
        ) == sorted(
            [
                (child, once, DependOn.FINISHED, False),
                (child, cron, DependOn.SUCCEEDED, True),
                (lone, cron, DependOn.SUCCEEDED, True),
            ]
        )
        matched = {
            (c.job_id, e.parent_job_id): getattr(matching_run(c, e, runs), "execution_id", None)
            for c in children
            for e in edges
            if e.child_job_id == c.job_id
        }
        assert matched == {(child, once): "o2", (child, cron): "c2000", (lone, cron): "c2000"}

    def test_record_waited_for_writes_the_parent_runs_on_the_execution(self) -> None:
        job = self.a_job()
        [key] = self.due(job, ("e1", 1_000))
        run = ParentRun(7, "p-1", 1_000, 1, ExecutionStatus.SUCCEEDED)
        self.fire_store.record_waited_for({key: [run]})
        assert json.loads(self.execution("e1").waited_for or "") == [
            {"jobId": 7, "executionId": "p-1", "status": "SUCCEEDED"}
        ]

    # wake_children

    def test_wake_children_brings_forward_only_runs_held_for_parents(self) -> None:
        parent, other = self.a_job(), self.a_job()
        child = self.a_job(after=(After(parent, DependOn.SUCCEEDED),))
        stranger = self.a_job(after=(After(other, DependOn.SUCCEEDED),))
        [held, backoff, due] = self.due(child, ("held", 9_000), ("backoff", 9_500), ("due", 10))
        [elsewhere] = self.due(stranger, ("elsewhere", 9_000))
        waiting = f"{HELD_FOR_PARENTS}{parent} run p-1 is QUEUED"
        self.fire_store.hold_scheduled({held: waiting, elsewhere: waiting}, 9_000)
        self.fire_store.hold_scheduled({due: waiting}, NOW - 1)  # due already: left as it is
        self.fire_store.hold_scheduled({backoff: "waiting: no live worker runs it"}, 9_500)
        assert self.fire_store.wake_children([parent], NOW) == 1
        at = {e: self.execution(e).scheduled_at for e in ("held", "backoff", "due", "elsewhere")}
        assert at == {"held": NOW, "backoff": 9_500, "due": NOW - 1, "elsewhere": 9_000}
        assert self.fire_store.wake_children([], NOW) == 0
