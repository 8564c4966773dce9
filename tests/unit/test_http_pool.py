"""The callback connection pool's slots: bounded per key, handed on in order, never lost
to a caller that gives up while it waits."""

from __future__ import annotations

import asyncio

from services.notifier.http_pool import ConnectionPool, PoolKey

KEY: PoolKey = (None, "http", "hooks.example.com", 80)
OTHER: PoolKey = ((), "http", "hooks.example.com", 80)


def test_a_key_past_its_bound_waits_for_a_slot_and_others_do_not() -> None:
    async def scenario() -> None:
        pool = ConnectionPool(per_key=2)
        assert await pool.acquire(KEY) is None
        assert await pool.acquire(KEY) is None
        third = asyncio.ensure_future(pool.acquire(KEY))
        await asyncio.sleep(0)
        assert not third.done(), "two in use under the key"
        assert await asyncio.wait_for(pool.acquire(OTHER), 1) is None, "a key of its own"
        pool.release(KEY, None, False)
        assert await asyncio.wait_for(third, 1) is None

    asyncio.run(scenario())


def test_a_caller_that_gives_up_waiting_loses_no_slot() -> None:
    async def scenario() -> None:
        pool = ConnectionPool(per_key=1)
        await pool.acquire(KEY)
        gave_up = asyncio.ensure_future(pool.acquire(KEY))
        await asyncio.sleep(0)
        gave_up.cancel()
        await asyncio.gather(gave_up, return_exceptions=True)
        pool.release(KEY, None, False)
        assert await asyncio.wait_for(pool.acquire(KEY), 1) is None

    asyncio.run(scenario())


def test_a_slot_handed_to_a_caller_that_gives_up_at_that_moment_goes_on() -> None:
    async def scenario() -> None:
        pool = ConnectionPool(per_key=1)
        await pool.acquire(KEY)
        handed = asyncio.ensure_future(pool.acquire(KEY))
        behind = asyncio.ensure_future(pool.acquire(KEY))
        await asyncio.sleep(0)
        pool.release(KEY, None, False)  # the slot goes to ``handed``...
        handed.cancel()  # ...which gives up before it runs again
        await asyncio.gather(handed, return_exceptions=True)
        assert handed.cancelled()
        assert await asyncio.wait_for(behind, 1) is None, "the slot went on to the next"

    asyncio.run(scenario())
