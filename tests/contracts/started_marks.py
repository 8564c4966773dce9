"""The started marks contract, which ``RedisStartedMarks`` and ``MemoryStartedMarks``
keep: a started key read back as its owner and stored result, one at a time or as a
batch of typed run marks, and the started epoch."""

from __future__ import annotations

from abc import ABC, abstractmethod

from common.started_marks import OPERATOR, RECONCILER, RunMark, RunState, StartedMarks, Taken

OUTCOME = '{"execution_id":"e1","status":"SUCCEEDED"}'


class StartedMarksContract(ABC):
    """What every started marks store answers as workers write keys and data is lost."""

    @property
    @abstractmethod
    def marks(self) -> StartedMarks:
        """The marks under test, with no key and no epoch."""

    @abstractmethod
    def take(self, execution_id: str, owner: str, ttl_seconds: int | None = None) -> None:
        """Set the key to ``owner`` (NX, with ``ttl_seconds`` to live), as a worker
        admitting the run does."""

    @abstractmethod
    def store_outcome(self, execution_id: str, owner: str, outcome_json: str) -> None:
        """Leave the key as a worker whose run ended leaves it."""

    @abstractmethod
    def lose_data(self) -> None:
        """Lose every key and the epoch, as a flush does."""

    def test_a_key_reads_as_its_owner_then_its_owner_and_outcome(self) -> None:
        assert self.marks.read_runs(["e1"]) == [RunMark()]
        self.take("e1", "w1")
        assert self.marks.read_runs(["e1"]) == [RunMark("w1")]
        self.store_outcome("e1", "w1", OUTCOME)
        assert self.marks.read_runs(["e1", "e2"]) == [RunMark("w1", OUTCOME), RunMark()]

    def test_the_epoch_is_set_when_missing_then_kept(self) -> None:
        assert self.marks.epoch(5_000) == 5_000
        assert self.marks.epoch(9_000) == 5_000

    def test_lost_data_takes_the_keys_and_the_next_read_of_the_epoch_sets_it_anew(self) -> None:
        self.marks.epoch(5_000)
        self.take("e1", "w1")
        self.lose_data()
        assert self.marks.read_runs(["e1"]) == [RunMark()]
        assert self.marks.epoch(9_000) == 9_000

    def test_a_batch_reads_each_key_as_its_run_state_in_order(self) -> None:
        self.take("e1", "w1")
        self.take("e2", "w1")
        self.store_outcome("e2", "w1", OUTCOME)
        self.take("e3", RECONCILER)
        self.take("e4", OPERATOR)
        marks = self.marks.read_runs(["e5", "e1", "e2", "e3", "e4"])
        assert marks == [
            RunMark(),
            RunMark("w1"),
            RunMark("w1", OUTCOME),
            RunMark(RECONCILER),
            RunMark(OPERATOR),
        ]
        assert [m.state for m in marks] == [
            RunState.NEVER_STARTED,
            RunState.RUNNING,
            RunState.ENDED_UNRECORDED,
            RunState.SETTLING,
            RunState.SETTLING,
        ]

    def test_a_batch_of_nothing_is_empty(self) -> None:
        assert self.marks.read_runs([]) == []
        assert self.marks.read_runs([], with_ttl=True) == []

    def test_a_batch_with_ttl_reads_how_long_each_key_has_left(self) -> None:
        self.take("e1", "w1", ttl_seconds=60)
        self.take("e2", "w1")
        with_ttl = self.marks.read_runs(["e1", "e2", "e3"], with_ttl=True)
        left = with_ttl[0].left_ms
        assert left is not None and 55_000 < left <= 60_000
        assert with_ttl[1:] == [RunMark("w1"), RunMark()]
        assert self.marks.read_runs(["e1"]) == [RunMark("w1")]

    def test_a_fence_takes_only_free_keys_for_its_ttl(self) -> None:
        self.take("e2", "w1")
        assert self.marks.fence(["e1", "e2"], RECONCILER, 60) == [True, False]
        fenced, running = self.marks.read_runs(["e1", "e2"], with_ttl=True)
        assert (fenced.owner, fenced.state) == (RECONCILER, RunState.SETTLING)
        assert fenced.left_ms is not None and 55_000 < fenced.left_ms <= 60_000
        assert running == RunMark("w1")
        assert self.marks.fence(["e1"], OPERATOR, 60) == [False]
        assert self.marks.fence([], OPERATOR, 60) == []

    def test_a_worker_takes_free_keys_for_its_ttl_and_finds_the_others_marks(self) -> None:
        self.take("e2", "w2")
        self.store_outcome("e3", "w2", OUTCOME)
        taken = self.marks.take_runs(["e1", "e2", "e3"], "w1", 60, 5_000)
        assert taken == Taken([None, RunMark("w2"), RunMark("w2", OUTCOME)], 5_000)
        [mine] = self.marks.read_runs(["e1"], with_ttl=True)
        assert mine.owner == "w1" and mine.left_ms is not None and 55_000 < mine.left_ms
        assert self.marks.take_runs(["e1"], "w1", 60, 9_000) == Taken([RunMark("w1")], 5_000)

    def test_taking_nothing_still_sets_the_epoch(self) -> None:
        assert self.marks.take_runs([], "w1", 60, 7_000) == Taken([], 7_000)
        assert self.marks.epoch(9_000) == 7_000

    def test_a_worker_releases_only_the_keys_it_holds_without_an_outcome(self) -> None:
        self.marks.take_runs(["e1", "e2"], "w1", 60, 5_000)
        self.take("e3", "w2")
        self.marks.store_outcomes("w1", [("e2", OUTCOME)])
        assert self.marks.release_runs(["e1", "e2", "e3", "e4"], "w1") == 1
        assert self.marks.read_runs(["e1", "e2", "e3"]) == [
            RunMark(),
            RunMark("w1", OUTCOME),
            RunMark("w2"),
        ]
        assert self.marks.release_runs([], "w1") == 0

    def test_outcomes_are_stored_only_on_keys_the_worker_holds_and_keep_their_ttl(self) -> None:
        self.marks.take_runs(["e1"], "w1", 60, 5_000)
        self.take("e2", "w2")
        self.marks.store_outcomes("w1", [("e1", OUTCOME), ("e2", OUTCOME), ("e3", OUTCOME)])
        stored, other, missing = self.marks.read_runs(["e1", "e2", "e3"], with_ttl=True)
        assert (stored.owner, stored.outcome, stored.state) == (
            "w1",
            OUTCOME,
            RunState.ENDED_UNRECORDED,
        )
        assert stored.left_ms is not None and 55_000 < stored.left_ms <= 60_000
        assert (other, missing) == (RunMark("w2"), RunMark())
        self.marks.store_outcomes("w1", [("e1", '{"again":1}')])
        assert self.marks.read_runs(["e1"]) == [RunMark("w1", OUTCOME)]

    def test_shortening_gives_existing_keys_their_new_ttl_and_leaves_gone_keys_gone(self) -> None:
        self.marks.take_runs(["e1", "e2"], "w1", 600, 5_000)
        self.marks.store_outcomes("w1", [("e1", OUTCOME)])
        self.marks.shorten(["e1", "e3"], 60)
        e1, e2, e3 = self.marks.read_runs(["e1", "e2", "e3"], with_ttl=True)
        assert e1.outcome == OUTCOME and e1.left_ms is not None and 55_000 < e1.left_ms <= 60_000
        assert e2.left_ms is not None and e2.left_ms > 60_000
        assert e3 == RunMark()
        self.marks.shorten([], 60)
