"""Freezing the startup heap."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from common.gc_freeze import freeze_startup_heap


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_objects_alive_at_startup_are_out_of_the_collectors_reach() -> None:
    kept = [[i] for i in range(1000)]
    frozen = freeze_startup_heap()
    assert frozen >= len(kept)
    collected = {id(o) for o in gc.get_objects()}
    assert not any(id(k) in collected for k in kept)
