"""Delivery rows read ahead of their attempts: an attempt uses its callback's row read
while it waited, without another read; a row too old, or one that said to wait for an
earlier run's callback, is read again; a failed read ahead costs only a read; rows
whose attempts never came are forgotten."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from common.db.deliveries import DeliveryRecord, DeliveryToSend
from common.states import DeliveryStatus
from services.notifier.gathering import Gathered
from services.notifier.read_ahead import READ_AHEAD_SECONDS, DeliveryReads


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Rows:
    """Delivery rows by id as a store thread reads them: every read batch is kept;
    ``held`` ids say their job's earlier callback is on its way; ``failing`` reads
    raise."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.held: set[str] = set()
        self.failing = 0

    def read(self, ids: Sequence[str]) -> list[DeliveryToSend | None]:
        self.batches.append(list(ids))
        if self.failing:
            self.failing -= 1
            raise ConnectionError("MySQL went away")
        return [DeliveryToSend(record(i), i in self.held) for i in ids]

    @property
    def reads(self) -> list[str]:
        return [i for batch in self.batches for i in batch]


def record(delivery_id: str) -> DeliveryRecord:
    status = DeliveryStatus.QUEUED
    return DeliveryRecord(
        1, delivery_id, "e", 1, 1, "http://h/", "{}", status, 0, None, None, 0, 0, None, None, None
    )


@pytest.fixture
def store() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(1)
    yield executor
    executor.shutdown()


def reads_of(rows: Rows, store: ThreadPoolExecutor, clock: Clock) -> DeliveryReads:
    return DeliveryReads(Gathered(rows.read, store), clock=clock)


def test_an_attempt_uses_the_row_read_while_its_callback_waited(store: ThreadPoolExecutor) -> None:
    rows, clock = Rows(), Clock()

    async def scenario() -> None:
        reads = reads_of(rows, store, clock)
        reads.read_ahead(["a", "b", "c"])
        await asyncio.sleep(0.05)
        clock.now = READ_AHEAD_SECONDS - 0.1
        found = [await reads.read(i) for i in ("a", "b", "c")]
        assert [f.record.delivery_id for f in found if f is not None] == ["a", "b", "c"]
        assert len(reads) == 0

    asyncio.run(scenario())
    assert rows.batches == [["a", "b", "c"]], "one gathered read, none on the attempts' path"


def test_a_row_too_old_or_saying_wait_is_read_again(store: ThreadPoolExecutor) -> None:
    rows, clock = Rows(), Clock()
    rows.held = {"held"}

    async def scenario() -> None:
        reads = reads_of(rows, store, clock)
        reads.read_ahead(["old"])
        await asyncio.sleep(0.05)
        clock.now = READ_AHEAD_SECONDS
        reads.read_ahead(["held"])
        await asyncio.sleep(0.05)
        rows.held = set()  # the earlier run's callback landed meanwhile
        assert await reads.read("old") is not None
        found = await reads.read("held")
        assert found is not None and not found.held, "the fresh row says it may go"

    asyncio.run(scenario())
    assert rows.reads == ["old", "held", "old", "held"]


def test_a_failed_read_ahead_is_read_again_and_a_row_never_used_is_forgotten(
    store: ThreadPoolExecutor,
) -> None:
    rows, clock = Rows(), Clock()
    rows.failing = 1

    async def scenario() -> None:
        reads = reads_of(rows, store, clock)
        reads.read_ahead(["a", "parked"])
        await asyncio.sleep(0.05)
        assert await reads.read("a") is not None, "the error cost a read, not the attempt"
        clock.now = READ_AHEAD_SECONDS
        reads.read_ahead(["b"])
        assert len(reads) == 1, "the parked callback's row is forgotten"
        await reads.read("b")

    asyncio.run(scenario())
    assert rows.reads == ["a", "parked", "a", "b"]
