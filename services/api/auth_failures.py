"""Failed authentication, counted per client address in Redis and throttled.

An unknown API key or a refused console sign-in costs a MySQL lookup; an address that
fails more than ``limit`` times in a window of ``window_seconds`` is answered 429 (with
the seconds left in its window as ``Retry-After``) before any lookup, until the window
ends. The count lives in Redis, so every API process sees the same one. Each failure is
logged with the client address; a throttled address is logged once per window.

IPv6 clients are counted by their /64, the block one host or customer usually holds, so
walking through addresses of one block does not reset the count.

When Redis does not answer, authentication goes on uncounted (the throttle protects
MySQL from floods and must not become an outage of its own).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import math
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.types import Scope

from common.errors import AuthThrottledError
from common.keys import RedisKeys

log = logging.getLogger(__name__)

# KEYS[1]: the address's counter. ARGV[1]: the window (ms). Returns {count, ttl_ms}.
COUNT_FAILURE = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {count, redis.call('PTTL', KEYS[1])}
"""

# KEYS[1]: the address's counter. Returns {count, ttl_ms}.
READ_FAILURES = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
return {count, redis.call('PTTL', KEYS[1])}
"""

REDIS_TIMEOUT_SECONDS = 0.5
WARN_EVERY_SECONDS = 10.0
UNKNOWN_CLIENT = "unknown"
# Throttled addresses remembered in memory; more start the memory afresh.
MAX_REMEMBERED = 10_000


def client_address(request: Request) -> str:
    """The address failures of ``request`` are counted under: the peer's IPv4 address,
    or the /64 of its IPv6 address (uvicorn puts a trusted proxy's X-Forwarded-For here)."""
    return scope_address(request.scope)


def scope_address(scope: Scope) -> str:
    """``client_address`` of the request of ``scope``, without building a Request."""
    client = scope.get("client")
    return counted_address(client[0] if client else "")


@functools.lru_cache(maxsize=4096)
def counted_address(host: str) -> str:
    """The address a peer ``host`` is counted under (see ``client_address``); remembered,
    as a flood sends the same few hosts over and over."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host or UNKNOWN_CLIENT
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _seconds(ttl_ms: int, window_seconds: int) -> int:
    """``Retry-After`` for a counter with ``ttl_ms`` left (whole seconds, at least 1)."""
    if ttl_ms < 0:
        return window_seconds
    return max(1, math.ceil(ttl_ms / 1000))


class FailedAuthentications:
    """Counts and logs failed authentications per client address; refuses an address
    over its limit. ``limit`` 0 (or no Redis client) logs failures and counts nothing."""

    def __init__(
        self,
        client: aioredis.Redis | None,
        keys: RedisKeys,
        limit: int,
        window_seconds: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client if limit > 0 else None
        # The clock refusals from memory age by; tests move a fake one.
        self._monotonic = monotonic
        self._keys = keys
        self.limit = limit
        self.window_seconds = window_seconds
        self._count = self._read = None
        if self._client is not None:
            self._count = self._client.register_script(COUNT_FAILURE)
            self._read = self._client.register_script(READ_FAILURES)
        self._warned_at = -math.inf
        self._refused_until: dict[str, float] = {}

    async def check(self, address: str) -> None:
        """Raise ``AuthThrottledError`` when ``address`` has used up its failures.

        An address Redis said is throttled is refused from memory until its window
        ends, so a flood from it costs this process no Redis call either."""
        if self._read is None:
            return
        remembered = self.refused_for(address)
        if remembered is not None:
            raise AuthThrottledError(remembered)
        try:
            count, ttl_ms = await self._read(keys=[self._keys.auth_failures(address)])
        except (RedisError, OSError) as e:
            self._warn(e)
            return
        if int(count) >= self.limit:
            seconds = _seconds(int(ttl_ms), self.window_seconds)
            if len(self._refused_until) > MAX_REMEMBERED:
                self._refused_until.clear()
            self._refused_until[address] = self._monotonic() + seconds
            raise AuthThrottledError(seconds)

    def refusing_any(self) -> bool:
        """Whether this process refuses some address from memory (a quick test first)."""
        return bool(self._refused_until)

    def refused_for(self, address: str) -> int | None:
        """The seconds ``address`` stays refused, as this process remembers; None when
        it is not (or no longer) refused from memory."""
        until = self._refused_until.get(address)
        if until is None:
            return None
        left = until - self._monotonic()
        if left <= 0:
            del self._refused_until[address]
            return None
        return max(1, math.ceil(left))

    async def failed(self, address: str, what: str) -> None:
        """Log one failed authentication of ``address`` (``what`` says which kind) and
        count it; the failure that uses up the limit logs the throttle too."""
        log.warning(
            "authentication failed from %s: %s", address, what, extra={"client_address": address}
        )
        if self._count is None:
            return
        try:
            count, ttl_ms = await self._count(
                keys=[self._keys.auth_failures(address)], args=[self.window_seconds * 1000]
            )
        except (RedisError, OSError) as e:
            self._warn(e)
            return
        if int(count) == self.limit:
            log.warning(
                "client %s failed authentication %d times; refused for %d s",
                address,
                self.limit,
                _seconds(int(ttl_ms), self.window_seconds),
                extra={"client_address": address},
            )

    def _warn(self, error: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_SECONDS:
            self._warned_at = now
            log.warning("failed authentications not counted, Redis did not answer: %s", error)

    async def close(self) -> None:
        """Close the Redis connections of the counter."""
        if self._client is not None:
            await self._client.aclose()


def build_failed_authentications(
    redis_url: str, keys: RedisKeys, limit: int, window_seconds: int
) -> FailedAuthentications:
    """The counter on its own Redis client with short timeouts and no retries (a Redis
    that does not answer lets authentication go on at once)."""
    client = None
    if limit > 0:
        client = aioredis.Redis.from_url(
            redis_url,
            socket_timeout=REDIS_TIMEOUT_SECONDS,
            socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
            retry=Retry(NoBackoff(), 0),
        )
    return FailedAuthentications(client, keys, limit, window_seconds)
