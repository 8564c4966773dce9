"""The aiohttp side of ``bench/posters.py``: signed callbacks from one ClientSession.

aiohttp is a benchmark-only dependency (``bench/requirements-callbacks.txt``); without
it installed this module still type-checks, its names then typed as Any.
"""

# mypy: disable-error-code="import-untyped,import-not-found,no-any-return"

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

TOTAL_SECONDS = 15.0


async def run_aiohttp(
    url: str,
    payload: str,
    headers: Callable[[], dict[str, str]],
    connections: int,
    seconds: float,
) -> int:
    """Post ``payload`` to ``url`` with fresh ``headers()`` from ``connections`` tasks
    sharing one session (its pool as large) until ``seconds`` have passed; the posts."""
    connector = aiohttp.TCPConnector(limit=connections, force_close=False)
    timeout = aiohttp.ClientTimeout(total=TOTAL_SECONDS)
    body = payload.encode()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        until = time.monotonic() + seconds

        async def keep_posting() -> int:
            done = 0
            while time.monotonic() < until:
                async with session.post(url, data=body, headers=headers()) as response:
                    await response.content.read(4 * 1024)
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}")
                done += 1
            return done

        counts = await asyncio.gather(*(keep_posting() for _ in range(connections)))
        return sum(counts)
