"""``RedisStartedMarks`` keeps the started marks contract (its fake: tests/unit)."""

from __future__ import annotations

import pytest
import redis

from common.config import StoreSettings
from common.keys import RedisKeys
from common.started_marks import SEPARATOR, RedisStartedMarks, StartedMarks
from tests.contracts.started_marks import StartedMarksContract


class TestRedisStartedMarks(StartedMarksContract):
    """The contract on the test's own namespace of the shared Redis."""

    @pytest.fixture(autouse=True)
    def _redis(self, redis_client: redis.Redis, namespace: StoreSettings) -> None:
        self._client = redis_client
        self._namespace = namespace.namespace
        self._keys = RedisKeys(namespace.namespace)
        self._marks = RedisStartedMarks(redis_client, self._keys)

    @property
    def marks(self) -> StartedMarks:
        return self._marks

    def take(self, execution_id: str, owner: str, ttl_seconds: int | None = None) -> None:
        key = self._keys.execution_started(execution_id)
        self._client.set(key, owner, nx=True, ex=ttl_seconds)

    def store_outcome(self, execution_id: str, owner: str, outcome_json: str) -> None:
        self._client.set(
            self._keys.execution_started(execution_id), owner + SEPARATOR + outcome_json
        )

    def lose_data(self) -> None:
        # The server is shared: this namespace's keys go, as a flush would take them.
        for key in self._client.scan_iter(f"{self._namespace}:*"):
            self._client.delete(key)
