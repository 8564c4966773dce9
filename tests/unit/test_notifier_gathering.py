"""Calls from many threads served together: each gets its own answer, a burst costs
few batches, and an error reaches every caller of its batch."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.notifier.gathering import Gathered


class Doubling:
    """Answers each key with its double; the first batch waits until released, so that
    the calls made meanwhile gather behind it."""

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


def test_one_caller_alone_is_served_at_once() -> None:
    doubling = Doubling()
    doubling.release.set()
    assert Gathered(doubling.serve).call(21) == 42
    assert doubling.batches == [[21]]


def test_calls_made_while_a_batch_runs_are_served_together_each_with_its_answer() -> None:
    doubling = Doubling()
    gathered = Gathered(doubling.serve)
    with ThreadPoolExecutor(17) as pool:
        first = pool.submit(gathered.call, 0)
        assert doubling.first_began.wait(5)
        rest = [pool.submit(gathered.call, key) for key in range(1, 17)]
        while len(gathered._waiting) < 16:
            threading.Event().wait(0.01)
        doubling.release.set()
        assert first.result(5) == 0
        assert [f.result(5) for f in rest] == [key * 2 for key in range(1, 17)]
    assert doubling.batches[0] == [0]
    assert sorted(doubling.batches[1]) == list(range(1, 17))
    assert len(doubling.batches) == 2


def test_a_batch_is_never_larger_than_most() -> None:
    doubling = Doubling()
    gathered = Gathered(doubling.serve, most=5)
    with ThreadPoolExecutor(13) as pool:
        first = pool.submit(gathered.call, 0)
        assert doubling.first_began.wait(5)
        rest = [pool.submit(gathered.call, key) for key in range(1, 13)]
        while len(gathered._waiting) < 12:
            threading.Event().wait(0.01)
        doubling.release.set()
        assert [f.result(5) for f in [first, *rest]] == [key * 2 for key in range(13)]
    assert max(len(batch) for batch in doubling.batches) <= 5
    assert sorted(key for batch in doubling.batches for key in batch) == list(range(13))


class StoreDown(Exception):
    pass


def test_an_error_of_a_batch_is_raised_in_every_thread_of_it_and_the_next_is_served() -> None:
    doubling = Doubling()

    def serve(keys: Sequence[int]) -> list[int]:
        answers = doubling.serve(keys)
        if len(doubling.batches) == 2:
            raise StoreDown("down")
        return answers

    gathered = Gathered(serve)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(gathered.call, 0)
        assert doubling.first_began.wait(5)
        failing = [pool.submit(gathered.call, key) for key in (1, 2, 3)]
        while len(gathered._waiting) < 3:
            threading.Event().wait(0.01)
        doubling.release.set()
        assert first.result(5) == 0
        for future in failing:
            with pytest.raises(StoreDown):
                future.result(5)
    assert sorted(doubling.batches[1]) == [1, 2, 3]
    assert gathered.call(4) == 8
