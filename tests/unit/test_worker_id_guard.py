"""A worker id is taken while its last heartbeat says it runs and its queue is consumed."""

from __future__ import annotations

from services.worker.id_guard import LastHeartbeat, taken_by


def _heartbeat(state: str = "ACTIVE") -> LastHeartbeat | None:
    fields = {
        "state": state,
        "last_heartbeat": "1700000000000",
        "hostname": "vm",
        "pid": "4242",
        "incarnation": "abc",
    }
    return LastHeartbeat.from_hash(fields)


def test_a_heartbeating_worker_whose_queue_is_consumed_holds_its_id() -> None:
    running = taken_by(_heartbeat(), consumers=1)
    assert running is not None
    assert (running.pid, running.hostname, running.sent_at) == ("4242", "vm", 1700000000000)


def test_a_predecessor_that_died_or_stopped_leaves_the_id_free() -> None:
    assert taken_by(None, consumers=1) is None, "its heartbeat expired"
    assert taken_by(_heartbeat(), consumers=0) is None, "its connection is gone"
    assert taken_by(_heartbeat("STOPPED"), consumers=1) is None, "it said it stopped"


def test_no_heartbeat_hash_is_no_heartbeat() -> None:
    assert LastHeartbeat.from_hash({}) is None
