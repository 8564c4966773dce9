"""Calls from many attempts on one loop served together: each gets its own answer, a
burst costs few batches, an error reaches every caller of its batch, and the loop is
never blocked while a batch is served."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.notifier.gathering import Gathered


class Doubling:
    """Answers each key with its double, in a store thread; the first batch waits until
    released, so that the calls made meanwhile gather behind it."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.first_began = threading.Event()
        self.release = threading.Event()

    def serve(self, keys: Sequence[int]) -> list[int]:
        self.batches.append(list(keys))
        if len(self.batches) == 1:
            self.first_began.set()
            assert self.release.wait(5)
        return [key * 2 for key in keys]


@pytest.fixture
def store() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(2)
    yield executor
    executor.shutdown()


async def _until(condition: object) -> None:
    for _ in range(500):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


def test_one_caller_alone_is_served_at_once(store: ThreadPoolExecutor) -> None:
    doubling = Doubling()
    doubling.release.set()
    assert asyncio.run(Gathered(doubling.serve, store).call(21)) == 42
    assert doubling.batches == [[21]]


def test_calls_made_while_a_batch_runs_are_served_together_each_with_its_answer(
    store: ThreadPoolExecutor,
) -> None:
    doubling = Doubling()
    gathered = Gathered(doubling.serve, store)

    async def scenario() -> tuple[int, list[int]]:
        first = asyncio.ensure_future(gathered.call(0))
        await _until(doubling.first_began.is_set)
        # The loop runs on while the first batch is served: these calls are made now.
        rest = [asyncio.ensure_future(gathered.call(key)) for key in range(1, 17)]
        await _until(lambda: len(gathered._waiting) == 16)
        doubling.release.set()
        return await first, list(await asyncio.gather(*rest))

    first, rest = asyncio.run(scenario())
    assert first == 0 and rest == [key * 2 for key in range(1, 17)]
    assert doubling.batches[0] == [0]
    assert sorted(doubling.batches[1]) == list(range(1, 17))
    assert len(doubling.batches) == 2


def test_a_batch_is_never_larger_than_most(store: ThreadPoolExecutor) -> None:
    doubling = Doubling()
    gathered = Gathered(doubling.serve, store, most=5)

    async def scenario() -> list[int]:
        first = asyncio.ensure_future(gathered.call(0))
        await _until(doubling.first_began.is_set)
        rest = [asyncio.ensure_future(gathered.call(key)) for key in range(1, 13)]
        await _until(lambda: len(gathered._waiting) == 12)
        doubling.release.set()
        return list(await asyncio.gather(first, *rest))

    assert asyncio.run(scenario()) == [key * 2 for key in range(13)]
    assert max(len(batch) for batch in doubling.batches) <= 5
    assert sorted(key for batch in doubling.batches for key in batch) == list(range(13))


class StoreDown(Exception):
    pass


def test_an_error_of_a_batch_is_raised_in_every_caller_of_it_and_the_next_is_served(
    store: ThreadPoolExecutor,
) -> None:
    doubling = Doubling()

    def serve(keys: Sequence[int]) -> list[int]:
        answers = doubling.serve(keys)
        if len(doubling.batches) == 2:
            raise StoreDown("down")
        return answers

    gathered = Gathered(serve, store)

    async def scenario() -> list[object]:
        first = asyncio.ensure_future(gathered.call(0))
        await _until(doubling.first_began.is_set)
        failing = [asyncio.ensure_future(gathered.call(key)) for key in (1, 2, 3)]
        await _until(lambda: len(gathered._waiting) == 3)
        doubling.release.set()
        assert await first == 0
        outcomes: list[object] = list(await asyncio.gather(*failing, return_exceptions=True))
        outcomes.append(await gathered.call(4))
        return outcomes

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, StoreDown) for o in outcomes[:3]) and outcomes[3] == 8
    assert sorted(doubling.batches[1]) == [1, 2, 3]
