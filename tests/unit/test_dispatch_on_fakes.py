"""Sending executions, on the in-memory broker and store: what lands, what comes back.

``MemoryPublisher`` and ``MemoryStore`` are held to RabbitMQ's and MySQL's behaviour by
the contracts in tests/contracts; tests/integration/test_publish_failures.py runs the
failure path on the real stores.
"""

from __future__ import annotations

import pytest

from common.db.executions import NewExecution
from common.errors import PublishFailedError
from common.memory.broker import MemoryBroker, MemoryPublisher
from common.memory.rows import MemoryJob
from common.memory.store import MemoryStore
from common.messages import DispatchPack
from common.states import ExecutionStatus
from common.topology import declare_core, declare_worker_queue, worker_queue
from services.dispatcher.routing.dispatch import Assignment, pack_dispatches, send_packs

NOW = 10_000
QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED


class Stage:
    """A store with SCHEDULED executions and a broker where only some workers have queues."""

    def __init__(self, *workers: str) -> None:
        self.store = MemoryStore()
        self.broker = MemoryBroker()
        declare_core(self.broker)
        for worker_id in workers:
            declare_worker_queue(self.broker, worker_id)
        self.publisher = MemoryPublisher(self.broker)
        self.job = self.store.add_job(MemoryJob())

    def scheduled(self, count: int, worker_id: str) -> list[Assignment]:
        """``count`` SCHEDULED executions, each assigned to ``worker_id``."""
        first = len(self.store.executions)
        ids = [f"e{n}" for n in range(first, first + count)]
        rows = [NewExecution(e, self.job, 1, 1_000 + n, 1_000) for n, e in enumerate(ids, first)]
        self.store.insert_executions(rows, 1_000)
        return [self.assignment(e, worker_id) for e in ids]

    def assignment(self, execution_id: str, worker_id: str) -> Assignment:
        row = self.store.execution(execution_id)
        return Assignment(
            row.id,
            execution_id,
            row.job_id,
            row.attempt,
            row.trigger_time,
            "demo.noop",
            "{}",
            worker_id,
        )

    def send(self, assignments: list[Assignment]) -> set[str]:
        """What the firer does in its transaction: mark QUEUED, then dispatch."""
        with self.store.transaction():
            self.store.mark_queued({a.execution_key: a.worker_id for a in assignments}, NOW)
            return send_packs(self.store, self.publisher, pack_dispatches(assignments, NOW))

    def landed(self, worker_id: str) -> list[str]:
        """The execution ids in the worker's queue, message after message."""
        batches = [
            DispatchPack.model_validate_json(m.body)
            for m in self.broker.messages(worker_queue(worker_id))
        ]
        return [e.execution_id for b in batches for e in b.executions]

    def statuses(self) -> dict[str, tuple[ExecutionStatus, str | None]]:
        return {r.execution_id: (r.status, r.worker_id) for r in self.store.executions.values()}


def test_executions_for_a_worker_with_a_queue_land_and_stay_queued() -> None:
    stage = Stage("w1")
    sent = stage.scheduled(3, "w1")
    assert stage.send(sent) == set()
    assert stage.landed("w1") == ["e0", "e1", "e2"]
    assert set(stage.statuses().values()) == {(QUEUED, "w1")}
    assert stage.publisher.commits == 1


def test_executions_no_queue_takes_go_back_to_scheduled_for_the_firer() -> None:
    stage = Stage("w1")
    sent = stage.scheduled(2, "w1") + stage.scheduled(2, "gone")
    assert stage.send(sent) == {"e2", "e3"}
    assert stage.landed("w1") == ["e0", "e1"]
    assert stage.statuses() == {
        "e0": (QUEUED, "w1"),
        "e1": (QUEUED, "w1"),
        "e2": (SCHEDULED, None),
        "e3": (SCHEDULED, None),
    }
    assert stage.store.execution("e2").dispatched_at is None


def test_packs_are_split_at_the_limit_and_all_land_once() -> None:
    stage = Stage("w1", "w2")
    sent = stage.scheduled(120, "w1") + stage.scheduled(7, "w2")
    assert stage.send(sent) == set()
    assert [
        len(DispatchPack.model_validate_json(m.body).executions)
        for m in stage.broker.messages(worker_queue("w1"))
    ] == [50, 50, 20]
    assert stage.landed("w1") == [a.execution_id for a in sent[:120]]
    assert stage.landed("w2") == [a.execution_id for a in sent[120:]]


def test_a_failed_publish_leaves_the_rows_scheduled_and_the_next_pass_sends_them_once() -> None:
    stage = Stage("w1")
    sent = stage.scheduled(3, "w1")
    stage.publisher.fail_next_commit()
    with pytest.raises(PublishFailedError):
        stage.send(sent)
    assert set(stage.statuses().values()) == {(SCHEDULED, None)}, "the transaction went back"
    assert stage.landed("w1") == []
    assert stage.send(sent) == set()
    assert stage.landed("w1") == ["e0", "e1", "e2"]
    assert set(stage.statuses().values()) == {(QUEUED, "w1")}


def test_nothing_to_send_publishes_nothing() -> None:
    stage = Stage("w1")
    assert stage.send([]) == set()
    assert stage.publisher.commits == 0
