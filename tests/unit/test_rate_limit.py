"""The rate limit's answers that need no Redis: Retry-After and the default burst."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from common.keys import RedisKeys
from services.api.rate_limit import RateLimiter, build_rate_limiter, retry_after_seconds


@pytest.mark.parametrize(
    ("wait_ms", "seconds"), [(0, 1), (1, 1), (250, 1), (1000, 1), (1001, 2), (99_999, 100)]
)
def test_retry_after_rounds_the_wait_up_to_whole_seconds(wait_ms: int, seconds: int) -> None:
    assert retry_after_seconds(wait_ms) == seconds


def test_no_rate_means_no_limiter() -> None:
    assert build_rate_limiter("redis://127.0.0.1:1/0", RedisKeys("t"), 0, 100) is None


@pytest.mark.parametrize(("rate", "burst"), [(0.5, 1), (10, 10), (12.5, 13)])
def test_the_burst_defaults_to_one_seconds_worth(rate: float, burst: int) -> None:
    client = aioredis.Redis.from_url("redis://127.0.0.1:1/0")
    limiter = RateLimiter(client, RedisKeys("t"), rate, 0)
    assert limiter.burst == burst
