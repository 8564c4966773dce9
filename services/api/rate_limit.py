"""A per-app rate limit for the API: a token bucket in Redis, shared by every API process.

Each app's bucket holds up to ``burst`` tokens and refills at ``rate`` tokens a second;
a request takes one, and a call that creates many rows one per row it creates: a batch
create one per job, a backfill one per run it creates (``take_more`` takes the rest once
the count is known). A request that finds too few is answered 429 with the seconds until
there are enough in ``Retry-After``, and takes none. A call larger than the bucket
passes when the bucket is full and leaves it in debt for the rest, so it is never
refused for good and the app's long-run rate still holds. Manual triggers and callback
replays take one each, as every call with an API key does. One Lua script reads,
refills and takes in a single round trip, on Redis's own clock (TIME), so API hosts
with skewed clocks share a bucket correctly.

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

# KEYS[1]: the app's bucket. ARGV: rate (tokens/s), burst, cost (tokens to take), need
# (tokens the bucket must hold for the cost to pass: the cost, or less for a call larger
# than the bucket, which then leaves it below zero). Returns {allowed, wait_ms}.
TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local need = tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or burst
local at = tonumber(bucket[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local allowed = 0
local wait_ms = 0
if tokens >= need then
  tokens = tokens - cost
  allowed = 1
else
  wait_ms = math.ceil((need - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
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
    """Takes one token from the calling app's bucket per request (more for a call that
    creates many rows), or refuses it."""

    def __init__(self, client: aioredis.Redis, keys: RedisKeys, rate: float, burst: int) -> None:
        self._client = client
        self._keys = keys
        self._rate = rate
        self.burst = burst if burst > 0 else max(1, math.ceil(rate))
        self._script = client.register_script(TOKEN_BUCKET)
        self._warned_at = -math.inf

    async def take(self, app: App, cost: int = 1, need: int | None = None) -> None:
        """Count ``cost`` requests of ``app``; raise ``RateLimitedError`` (and take none)
        when its bucket holds fewer than ``need`` tokens (``cost``, at most the bucket's
        size, unless given)."""
        cost = max(1, cost)
        need = min(cost, self.burst) if need is None else max(0, min(need, cost, self.burst))
        try:
            allowed, wait_ms = await self._script(
                keys=[self._keys.rate_limit(app.app_id)], args=[self._rate, self.burst, cost, need]
            )
        except (RedisError, OSError) as e:
            self._warn(e)
            return
        if not int(allowed):
            raise RateLimitedError(app.app_id, retry_after_seconds(int(wait_ms)))

    def take_more(self, app: App, units: int, paid: int = 1) -> None:
        """From a synchronous route's worker thread: a call that counts ``units``
        requests (the jobs of a batch, the runs a backfill creates), of which it has
        ``paid`` already (the request's own token), takes the rest. Past the bucket's
        size it passes if the bucket was full and leaves the bucket in debt. Raises
        ``RateLimitedError``."""
        extra = units - paid
        if extra > 0:
            need = max(0, min(extra, self.burst - paid))
            anyio.from_thread.run(self.take, app, extra, need)

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


class RowCharge:
    """What a call that creates many rows pays against its app's rate limit: one token
    per row it creates, of which the request's own token paid one. Called again (a
    transaction run again after a lock conflict), it takes only what was not paid yet."""

    def __init__(self, limiter: RateLimiter | None, app: App) -> None:
        self._limiter = limiter
        self._app = app
        self._paid = 1

    def __call__(self, rows: int) -> None:
        """Pay for ``rows`` rows before they are written; raises ``RateLimitedError``."""
        if self._limiter is None or rows <= self._paid:
            return
        self._limiter.take_more(self._app, rows, self._paid)
        self._paid = rows
