"""A per-app rate limit for the API: a token bucket in Redis, shared by every API process.

Each app's bucket holds up to ``burst`` tokens and refills at ``rate`` tokens a second;
a request takes one, a batch create one per job (``take_more`` takes the rest once the
body is read; never more than the bucket holds, so every batch can pass a full bucket),
and a request that finds too few is answered 429 with the seconds until there are
enough in ``Retry-After``. Manual triggers and callback replays take one each, as every
call with an API key does. One Lua script reads, refills and takes in a
single round trip, on Redis's own clock (TIME), so API hosts with skewed clocks share a
bucket correctly.

When Redis does not answer, the request goes through as if no limit were set: the limit
protects the stores from floods, and must not become an outage of its own. The calls
that need Redis anyway (a create reads the cluster clock) still answer 503.
"""

from __future__ import annotations

import logging
import math
import time

import anyio.from_thread
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from common.db.apps import App
from common.errors import RateLimitedError
from common.keys import RedisKeys

log = logging.getLogger(__name__)

# KEYS[1]: the app's bucket. ARGV: rate (tokens/s), burst, cost (tokens to take).
# Returns {allowed, wait_ms}.
TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or burst
local at = tonumber(bucket[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local allowed = 0
local wait_ms = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  wait_ms = math.ceil((cost - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, wait_ms}
"""

# How long a Redis call may take before the request goes on without the limit.
REDIS_TIMEOUT_SECONDS = 0.5
# At most one warning this often while Redis stays away.
WARN_EVERY_SECONDS = 10.0


def retry_after_seconds(wait_ms: int) -> int:
    """``Retry-After`` for a wait of ``wait_ms``: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_ms / 1000))


class RateLimiter:
    """Takes one token from the calling app's bucket per request, or refuses it."""

    def __init__(self, client: aioredis.Redis, keys: RedisKeys, rate: float, burst: int) -> None:
        self._client = client
        self._keys = keys
        self._rate = rate
        self.burst = burst if burst > 0 else max(1, math.ceil(rate))
        self._script = client.register_script(TOKEN_BUCKET)
        self._warned_at = -math.inf

    async def take(self, app: App, cost: int = 1) -> None:
        """Count ``cost`` requests of ``app`` (at most the bucket's size); raise
        ``RateLimitedError`` when it has not that many left (and take none)."""
        cost = max(1, min(cost, self.burst))
        try:
            allowed, wait_ms = await self._script(
                keys=[self._keys.rate_limit(app.app_id)], args=[self._rate, self.burst, cost]
            )
        except (RedisError, OSError) as e:
            self._warn(e)
            return
        if not int(allowed):
            raise RateLimitedError(app.app_id, retry_after_seconds(int(wait_ms)))

    def take_rest_of_batch(self, app: App, jobs: int) -> None:
        """From a synchronous route's worker thread: a batch of ``jobs`` counts one per
        job, of which the request itself took one already (at most the bucket's size
        in all). Raises ``RateLimitedError``."""
        extra = min(jobs, self.burst) - 1
        if extra > 0:
            anyio.from_thread.run(self.take, app, extra)

    def _warn(self, error: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_SECONDS:
            self._warned_at = now
            log.warning("rate limit not applied, Redis did not answer: %s", error)

    async def close(self) -> None:
        """Close the Redis connections of the limiter."""
        await self._client.aclose()


def build_rate_limiter(
    redis_url: str, keys: RedisKeys, rate: float, burst: int
) -> RateLimiter | None:
    """A limiter on its own Redis client with short timeouts; None when ``rate`` is 0."""
    if rate <= 0:
        return None
    client = aioredis.Redis.from_url(
        redis_url,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        # No retries: a Redis that does not answer lets the request go on at once.
        retry=Retry(NoBackoff(), 0),
    )
    return RateLimiter(client, keys, rate, burst)
