"""The notifier waits out a MySQL outage with a growing, jittered pause."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.exc import OperationalError

from services.notifier.outages import StoreBackoff


async def _outage() -> None:
    raise OperationalError("SELECT 1", {}, Exception(2003, "Can't connect"))


async def _seven() -> int:
    return 7


async def _not_a_number() -> int:
    return int("x")


class Pauses:
    """An attempt's pauses, noted instead of waited."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.seconds.append(seconds)


def test_each_outage_in_a_row_waits_longer_then_success_starts_afresh() -> None:
    pauses = Pauses()
    backoff = StoreBackoff(sleep=pauses.sleep)
    for _ in range(5):
        with pytest.raises(OperationalError):
            asyncio.run(backoff.run(_outage))
    assert backoff.failures == 5
    seconds = pauses.seconds
    assert 0.5 <= seconds[0] <= 1 and 4 <= seconds[3] <= 8 and 5 <= seconds[4] <= 10
    assert asyncio.run(backoff.run(_seven)) == 7
    assert backoff.failures == 0


def test_an_error_that_is_no_outage_does_not_wait() -> None:
    pauses = Pauses()
    backoff = StoreBackoff(sleep=pauses.sleep)
    with pytest.raises(ValueError):
        asyncio.run(backoff.run(_not_a_number))
    assert pauses.seconds == [] and backoff.failures == 0


def test_the_pause_waits_on_the_loop_and_lets_other_attempts_run() -> None:
    """An attempt waiting out an outage holds its slot, never the loop."""

    async def scenario() -> list[str]:
        seen: list[str] = []

        async def other() -> None:
            seen.append("other ran")

        backoff = StoreBackoff(sleep=lambda s: asyncio.sleep(0.05))
        waiting = asyncio.ensure_future(backoff.run(_outage))
        await asyncio.sleep(0)
        await other()
        with pytest.raises(OperationalError):
            await waiting
        seen.append("outage raised")
        return seen

    assert asyncio.run(scenario()) == ["other ran", "outage raised"]
