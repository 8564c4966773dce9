"""The worker marks contract, which ``RedisWorkerMarks`` and ``MemoryWorkerMarks`` keep:
heartbeat hashes that expire, what a worker held, and operators' stop requests and
standing drains as heartbeats take them."""

from __future__ import annotations

from abc import ABC, abstractmethod

from common.keys import WORKER_HELD, WORKER_HELD_AT, WORKER_INCARNATION
from common.worker_marks import Held, Orders, WorkerMarks

TTL_MS = 300
BEAT = {"state": "ACTIVE"}


class WorkerMarksContract(ABC):
    """What every worker marks store answers as workers beat and operators order."""

    @property
    @abstractmethod
    def marks(self) -> WorkerMarks:
        """The marks under test, holding nothing."""

    @abstractmethod
    def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` pass for the marks' expiries."""

    def test_a_beat_is_read_back_as_text_until_it_expires(self) -> None:
        assert self.marks.last_beat("w1") == {}
        self.marks.beat("w1", {"state": "ACTIVE", "pid": 42, WORKER_INCARNATION: "a"}, TTL_MS)
        assert self.marks.last_beat("w1") == {
            "state": "ACTIVE",
            "pid": "42",
            WORKER_INCARNATION: "a",
        }
        assert self.marks.last_beat("w2") == {}
        self.pass_time(TTL_MS / 1000 + 0.2)
        assert self.marks.last_beat("w1") == {}

    def test_what_a_worker_held_is_read_from_its_last_beat(self) -> None:
        assert self.marks.held("w1") is None
        self.marks.beat("w1", {"state": "ACTIVE"}, TTL_MS)
        assert self.marks.held("w1") is None, "a beat that says nothing of it"
        self.marks.beat("w1", {WORKER_HELD: 3, WORKER_HELD_AT: 1_000}, TTL_MS)
        assert self.marks.held("w1") == Held(3, 1_000)
        self.marks.beat("w1", {WORKER_HELD: 0, WORKER_HELD_AT: 2_000}, TTL_MS)
        assert self.marks.held("w1") == Held(0, 2_000)
        assert self.marks.last_beat("w1")["state"] == "ACTIVE", "fields not written are kept"

    def test_a_stop_request_is_taken_by_one_beat_only(self) -> None:
        self.marks.request_stop("w1", "alice", 60)
        assert self.marks.stops_requested(["w1", "w2"]) == {"w1"}
        assert self.marks.beat("w2", BEAT, TTL_MS) == Orders()
        assert self.marks.beat("w1", BEAT, TTL_MS) == Orders(stop_by="alice")
        assert self.marks.beat("w1", BEAT, TTL_MS) == Orders()
        assert self.marks.stops_requested(["w1", "w2"]) == set()

    def test_a_stop_request_no_beat_takes_expires_or_is_forgotten(self) -> None:
        self.marks.request_stop("w1", "alice", 1)
        self.pass_time(1.2)
        assert self.marks.stops_requested(["w1"]) == set()
        self.marks.request_stop("w1", "alice", 60)
        self.marks.forget_stop_request("w1")
        assert self.marks.beat("w1", BEAT, TTL_MS) == Orders()

    def test_a_standing_drain_is_read_by_every_beat_until_lifted(self) -> None:
        self.marks.drain("w1", "bob")
        assert self.marks.drained(["w1", "w2"]) == {"w1"}
        assert self.marks.beat("w1", BEAT, TTL_MS) == Orders(drained_by="bob")
        assert self.marks.beat("w1", BEAT, TTL_MS) == Orders(drained_by="bob")
        assert self.marks.undrain("w1")
        assert not self.marks.undrain("w1"), "nothing left to lift"
        assert self.marks.beat("w1", BEAT, TTL_MS) == Orders()
        assert self.marks.drained(["w1"]) == set()

    def test_no_workers_asked_is_none_found(self) -> None:
        assert self.marks.drained([]) == set()
        assert self.marks.stops_requested([]) == set()
