"""The started marks contract, which ``RedisStartedMarks`` and ``MemoryStartedMarks``
keep: a started key read back as its owner and stored result, and the started epoch."""

from __future__ import annotations

from abc import ABC, abstractmethod

from common.started_mark import StartedMarks

OUTCOME = '{"execution_id":"e1","status":"SUCCEEDED"}'


class StartedMarksContract(ABC):
    """What every started marks store answers as workers write keys and data is lost."""

    @property
    @abstractmethod
    def marks(self) -> StartedMarks:
        """The marks under test, with no key and no epoch."""

    @abstractmethod
    def take(self, execution_id: str, owner: str) -> None:
        """Set the key to ``owner``, as a worker admitting the run does."""

    @abstractmethod
    def store_outcome(self, execution_id: str, owner: str, outcome_json: str) -> None:
        """Leave the key as a worker whose run ended leaves it."""

    @abstractmethod
    def lose_data(self) -> None:
        """Lose every key and the epoch, as a flush does."""

    def test_a_key_reads_as_its_owner_then_its_owner_and_outcome(self) -> None:
        assert self.marks.read("e1") == (None, None)
        self.take("e1", "w1")
        assert self.marks.read("e1") == ("w1", None)
        self.store_outcome("e1", "w1", OUTCOME)
        assert self.marks.read("e1") == ("w1", OUTCOME)
        assert self.marks.read("e2") == (None, None)

    def test_the_epoch_is_set_when_missing_then_kept(self) -> None:
        assert self.marks.epoch(5_000) == 5_000
        assert self.marks.epoch(9_000) == 5_000

    def test_lost_data_takes_the_keys_and_the_next_read_of_the_epoch_sets_it_anew(self) -> None:
        self.marks.epoch(5_000)
        self.take("e1", "w1")
        self.lose_data()
        assert self.marks.read("e1") == (None, None)
        assert self.marks.epoch(9_000) == 9_000
