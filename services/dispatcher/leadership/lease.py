"""A Redis lease: one holder at a time, renewed and released only with its own token."""

from __future__ import annotations

import secrets

import redis

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class RedisLease:
    """A named lease with a random token; renew and release compare the token first."""

    def __init__(self, client: redis.Redis, key: str, ttl_ms: int) -> None:
        self._client = client
        self.key = key
        self.ttl_ms = ttl_ms
        self.token = secrets.token_hex(16)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self) -> bool:
        """Take the lease if nobody holds it; True when this holder has it now."""
        return bool(self._client.set(self.key, self.token, nx=True, px=self.ttl_ms))

    def renew(self) -> bool:
        """Extend the lease; False when it was lost (expired or taken by another)."""
        return bool(self._renew(keys=[self.key], args=[self.token, self.ttl_ms]))

    def release(self) -> bool:
        """Give the lease up if still held; never deletes another holder's lease."""
        return bool(self._release(keys=[self.key], args=[self.token]))

    def holder(self) -> str | None:
        """The token of whoever holds the lease now, if anyone."""
        value = self._client.get(self.key)
        return value.decode() if isinstance(value, bytes) else value
