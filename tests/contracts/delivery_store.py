"""The delivery store contract, which ``MySqlDeliveryStore`` and ``MemoryStore`` keep: a
callback's delivery confirmed in the queue, swept when left PENDING, handed back when
its run is taken back, read before its attempt (held behind an earlier run's), its
attempts recorded, replayed from the dead letters.

Row locks are not held to it: the memory store has no other transaction
(tests/integration/test_store_conflicts.py and test_held_rows.py hold MySQL to them).
"""

from __future__ import annotations

from common.db.deliveries import DeliveryRecord, NewAttempt, NewDelivery
from common.db.executions import NewExecution
from common.states import DeadReason, DeliveryStatus, ExecutionStatus
from tests.contracts.store_harness import NOW, StoreHarness

DONE = ExecutionStatus.SUCCEEDED
URL = "http://h.example/cb"


class DeliveryStoreContract(StoreHarness):
    """What every delivery store does, call by call."""

    def recorded(
        self, *triggers: int, status: DeliveryStatus = DeliveryStatus.PENDING
    ) -> list[str]:
        """A job with one ended run at each trigger time, each with a delivery recorded
        ``status`` at ``NOW``; the deliveries' ids, in trigger order."""
        job = self.a_job()
        runs = [NewExecution(f"e-{job}-{t}", job, 1, t, t, DONE, worker_id="w1") for t in triggers]
        self.store.insert_executions(runs, NOW)
        made = [
            NewDelivery(f"d-{r.execution_id}", r.execution_id, job, self.app_pk, URL, "{}")
            for r in runs
        ]
        self.delivery_store.insert_deliveries(made, NOW, status)
        return [d.delivery_id for d in made]

    def read(self, delivery_id: str) -> DeliveryRecord:
        found = self.delivery_store.get_delivery(delivery_id)
        assert found is not None
        return found

    def status(self, delivery_id: str) -> DeliveryStatus:
        return self.read(delivery_id).status

    # get_delivery

    def test_a_delivery_is_read_as_recorded_and_an_unknown_one_is_none(self) -> None:
        (one,) = self.recorded(1_000)
        found = self.read(one)
        assert (found.delivery_id, found.url, found.payload) == (one, URL, "{}")
        assert (found.status, found.attempts, found.created_at) == (DeliveryStatus.PENDING, 0, NOW)
        assert (found.app_pk, found.delivered_at, found.dead_reason) == (self.app_pk, None, None)
        assert self.delivery_store.get_delivery("msg_none") is None

    # confirm_queued

    def test_confirmed_pending_deliveries_are_queued_and_others_stay(self) -> None:
        pending, dead, other = self.recorded(1_000, 2_000, 3_000)
        self.set_delivery_status(dead, DeliveryStatus.DEAD)
        self.delivery_store.confirm_queued([pending, dead, "msg_none"], NOW + 1)
        self.delivery_store.confirm_queued([], NOW + 1)
        assert [self.status(d) for d in (pending, dead, other)] == [
            DeliveryStatus.QUEUED,
            DeliveryStatus.DEAD,
            DeliveryStatus.PENDING,
        ]
        assert self.read(pending).updated_at == NOW + 1

    # stale_pending

    def test_stale_pending_are_pending_ones_older_than_the_cut_off_by_row_up_to_the_limit(
        self,
    ) -> None:
        first, queued, third, fourth = self.recorded(1_000, 2_000, 3_000, 4_000)
        self.delivery_store.confirm_queued([queued], NOW)
        assert self.delivery_store.stale_pending(NOW, 10) == []
        found = self.delivery_store.stale_pending(NOW + 1, 2, lock=True)
        assert [d.delivery_id for d in found] == [first, third]
        assert [d.delivery_id for d in self.delivery_store.stale_pending(NOW + 1, 10)] == [
            first,
            third,
            fourth,
        ]

    # return_unattempted_to_pending

    def test_queued_deliveries_never_attempted_go_back_to_pending(self) -> None:
        fresh, attempted, delivered = self.recorded(
            1_000, 2_000, 3_000, status=DeliveryStatus.QUEUED
        )
        self.delivery_store.record_attempts(
            [
                NewAttempt(attempted, 1, DeliveryStatus.RETRYING, 500, "boom", 3, NOW + 60_000),
                NewAttempt(delivered, 1, DeliveryStatus.DELIVERED, 200, None, 3),
            ],
            NOW,
        )
        runs = [str(self.read(d).execution_id) for d in (fresh, attempted, delivered)]
        moved = self.delivery_store.return_unattempted_to_pending([*runs, "e-none"], NOW + 5)
        assert moved == 1
        assert self.delivery_store.return_unattempted_to_pending([], NOW + 5) == 0
        assert [self.status(d) for d in (fresh, attempted, delivered)] == [
            DeliveryStatus.PENDING,
            DeliveryStatus.RETRYING,
            DeliveryStatus.DELIVERED,
        ]
        assert self.read(fresh).updated_at == NOW + 5

    # deliveries_to_send

    def test_a_later_run_is_held_behind_an_earlier_one_still_on_its_way(self) -> None:
        first, second, third = self.recorded(1_000, 2_000, 3_000)
        (settled_first, settled_second) = self.recorded(1_000, 2_000)
        self.set_delivery_status(settled_first, DeliveryStatus.DELIVERED)
        ids = [first, second, third, settled_first, settled_second, "msg_none"]
        found = self.delivery_store.deliveries_to_send(ids)
        assert {d: s.held for d, s in found.items()} == {
            first: False,
            second: True,
            third: True,
            settled_first: False,
            settled_second: False,
        }
        assert found[second].record == self.read(second)
        assert self.delivery_store.deliveries_to_send([]) == {}

    # record_attempts

    def test_each_delivery_is_left_in_the_state_its_last_attempt_leaves(self) -> None:
        ok, retried, dead, twice = self.recorded(1_000, 2_000, 3_000, 4_000)
        self.delivery_store.record_attempts(
            [
                NewAttempt(ok, 1, DeliveryStatus.DELIVERED, 204, None, 7),
                NewAttempt(retried, 1, DeliveryStatus.RETRYING, 503, "busy", 7, NOW + 30_000),
                NewAttempt(dead, 1, DeliveryStatus.DEAD, 410, "gone", 7, None, DeadReason.GONE),
                NewAttempt(twice, 1, DeliveryStatus.RETRYING, None, "refused", 7, NOW + 10),
                NewAttempt(twice, 2, DeliveryStatus.DELIVERED, 200, None, 7),
                NewAttempt("msg_none", 1, DeliveryStatus.DELIVERED, 200, None, 7),
            ],
            NOW + 100,
        )
        seen = {d: self.read(d) for d in (ok, retried, dead, twice)}
        assert {d: (r.status, r.attempts) for d, r in seen.items()} == {
            ok: (DeliveryStatus.DELIVERED, 1),
            retried: (DeliveryStatus.RETRYING, 1),
            dead: (DeliveryStatus.DEAD, 1),
            twice: (DeliveryStatus.DELIVERED, 2),
        }
        assert (seen[ok].delivered_at, seen[ok].last_status_code) == (NOW + 100, 204)
        assert (seen[retried].next_attempt_at, seen[retried].last_error) == (NOW + 30_000, "busy")
        assert (seen[dead].dead_reason, seen[dead].delivered_at) == (DeadReason.GONE, None)
        assert (seen[twice].last_status_code, seen[twice].next_attempt_at) == (200, None)
        assert all(r.updated_at == NOW + 100 for r in seen.values())
        self.delivery_store.record_attempts([], NOW)

    def test_a_late_copy_of_a_delivered_callback_changes_nothing(self) -> None:
        (one,) = self.recorded(1_000)
        self.delivery_store.record_attempts(
            [NewAttempt(one, 1, DeliveryStatus.DELIVERED, 200, None, 7)], NOW + 1
        )
        self.delivery_store.record_attempts(
            [NewAttempt(one, 1, DeliveryStatus.RETRYING, 500, "late", 7, NOW + 9)], NOW + 2
        )
        found = self.read(one)
        assert (found.status, found.attempts, found.updated_at) == (
            DeliveryStatus.DELIVERED,
            1,
            NOW + 1,
        )
        assert (found.last_error, found.next_attempt_at) == (None, None)

    def test_a_long_error_is_kept_to_its_first_4096_characters(self) -> None:
        (one,) = self.recorded(1_000)
        error = "x" * 5_000 + "%s '"
        self.delivery_store.record_attempts(
            [NewAttempt(one, 1, DeliveryStatus.RETRYING, None, error, 7, NOW + 9)], NOW
        )
        assert self.read(one).last_error == "x" * 4_096

    # mark_replayed

    def test_replayed_dead_deliveries_are_queued_again_and_others_stay(self) -> None:
        dead, delivered = self.recorded(1_000, 2_000)
        self.delivery_store.record_attempts(
            [
                NewAttempt(dead, 1, DeliveryStatus.DEAD, 410, "gone", 7, None, DeadReason.GONE),
                NewAttempt(delivered, 1, DeliveryStatus.DELIVERED, 200, None, 7),
            ],
            NOW,
        )
        self.delivery_store.mark_replayed([dead, delivered, "msg_none"], NOW + 3)
        self.delivery_store.mark_replayed([], NOW + 3)
        replayed = self.read(dead)
        assert (replayed.status, replayed.dead_reason, replayed.updated_at) == (
            DeliveryStatus.QUEUED,
            None,
            NOW + 3,
        )
        assert replayed.attempts == 1
        assert self.status(delivered) == DeliveryStatus.DELIVERED

    # start_again

    def test_a_settled_delivery_starts_again_pending_and_one_on_its_way_does_not(self) -> None:
        dead, delivered, pending = self.recorded(1_000, 2_000, 3_000)
        self.delivery_store.record_attempts(
            [
                NewAttempt(dead, 1, DeliveryStatus.DEAD, 410, "gone", 7, None, DeadReason.GONE),
                NewAttempt(delivered, 1, DeliveryStatus.DELIVERED, 200, None, 7),
            ],
            NOW,
        )
        store = self.delivery_store
        assert [store.start_again(d, NOW + 4) for d in (dead, delivered, pending, "msg_none")] == [
            True,
            True,
            False,
            False,
        ]
        for again in (self.read(dead), self.read(delivered)):
            assert (again.status, again.updated_at, again.attempts) == (
                DeliveryStatus.PENDING,
                NOW + 4,
                1,
            )
            assert (again.dead_reason, again.delivered_at, again.next_attempt_at) == (
                None,
                None,
                None,
            )

    # find_for_app, page_for_job, attempts_of

    def test_an_apps_delivery_is_found_for_it_alone(self) -> None:
        (one,) = self.recorded(1_000)
        found = self.delivery_store.find_for_app(self.app_pk, one)
        assert found is not None and found.delivery_id == one
        assert self.delivery_store.find_for_app(self.app_pk + 1, one) is None
        assert self.delivery_store.find_for_app(self.app_pk, "msg_none") is None

    def test_a_jobs_deliveries_come_in_pages_newest_first_with_their_attempts(self) -> None:
        made = self.recorded(1_000, 2_000, 3_000)
        self.recorded(1_000)  # another job's
        self.delivery_store.record_attempts(
            [
                NewAttempt(made[0], 1, DeliveryStatus.RETRYING, 500, "boom", 4, NOW + 9),
                NewAttempt(made[0], 2, DeliveryStatus.DELIVERED, 200, None, 5),
            ],
            NOW + 2,
        )
        job = self.read(made[0]).job_id
        assert job is not None
        first = self.delivery_store.page_for_job(job, None, 2)
        assert [d.delivery_id for d in first] == [made[2], made[1]]
        rest = self.delivery_store.page_for_job(job, first[-1].delivery_pk, 2)
        assert [d.delivery_id for d in rest] == [made[0]]
        tried = self.delivery_store.attempts_of([rest[0].delivery_pk, first[0].delivery_pk])
        assert tried[first[0].delivery_pk] == []
        assert [
            (a.attempt, a.status_code, a.error, a.duration_ms) for a in tried[rest[0].delivery_pk]
        ] == [
            (1, 500, "boom", 4),
            (2, 200, None, 5),
        ]
        assert {a.attempted_at for a in tried[rest[0].delivery_pk]} == {NOW + 2}
        assert self.delivery_store.attempts_of([]) == {}

    # dead_deliveries, dead_of_job, count_dead

    def test_dead_deliveries_are_listed_most_recently_parked_first_and_counted(self) -> None:
        first, second, alive = self.recorded(1_000, 2_000, 3_000)
        other_job = self.recorded(1_000)
        for at, delivery_id in enumerate((first, second, *other_job), start=1):
            dead = NewAttempt(
                delivery_id, 1, DeliveryStatus.DEAD, 410, None, 7, None, DeadReason.GONE
            )
            self.delivery_store.record_attempts([dead], NOW + at)
        store = self.delivery_store
        assert [d.delivery_id for d in store.dead_deliveries(10)] == [other_job[0], second, first]
        assert [d.delivery_id for d in store.dead_deliveries(1)] == [other_job[0]]
        assert [d.delivery_id for d in store.dead_deliveries(10, self.app_pk + 1)] == []
        assert len(store.dead_deliveries(10, app_pks={self.app_pk})) == 3
        assert store.dead_deliveries(10, app_pks=set()) == []
        job = self.read(first).job_id
        assert job is not None
        assert [d.delivery_id for d in store.dead_of_job(job)] == [first, second]
        assert (store.count_dead(), store.count_dead({self.app_pk}), store.count_dead(set())) == (
            3,
            3,
            0,
        )
        assert self.status(alive) == DeliveryStatus.PENDING

    # prune_settled

    def test_settled_deliveries_past_the_cut_off_are_pruned_in_batches_with_their_attempts(
        self,
    ) -> None:
        made = self.recorded(1_000, 2_000, 3_000, 4_000, 5_000)
        ok, dead, fresh, queued = made[0], made[1], made[2], made[3]
        self.delivery_store.record_attempts(
            [
                NewAttempt(ok, 1, DeliveryStatus.DELIVERED, 200, None, 7),
                NewAttempt(dead, 1, DeliveryStatus.DEAD, 410, None, 7, None, DeadReason.GONE),
                NewAttempt(made[4], 1, DeliveryStatus.DELIVERED, 200, None, 7),
            ],
            NOW,
        )
        self.delivery_store.record_attempts(
            [NewAttempt(fresh, 1, DeliveryStatus.DELIVERED, 200, None, 7)], NOW + 50
        )
        self.delivery_store.confirm_queued([queued], NOW)
        pks = [self.read(d).delivery_pk for d in (ok, dead, made[4])]
        assert self.delivery_store.prune_settled(NOW + 10, 2) == 2
        assert self.delivery_store.prune_settled(NOW + 10, 2) == 1
        assert self.delivery_store.prune_settled(NOW + 10, 2) == 0
        assert [self.delivery_store.get_delivery(d) for d in (ok, dead, made[4])] == [None] * 3
        assert self.status(fresh) == DeliveryStatus.DELIVERED
        assert self.status(queued) == DeliveryStatus.QUEUED
        assert self.delivery_store.attempts_of(pks) == {pk: [] for pk in pks}

    # callbacks_of

    def test_the_callbacks_among_deliveries_are_read_by_id(self) -> None:
        # Alerts are left out (tests/integration/test_alerts_system.py: a DEAD alert
        # fires nothing), which needs an alert rule's row.
        second, first = self.recorded(1_000, 2_000)
        found = self.delivery_store.callbacks_of([second, first, "msg_none"])
        assert [d.delivery_id for d in found] == sorted([first, second])
        assert self.delivery_store.callbacks_of([]) == []
