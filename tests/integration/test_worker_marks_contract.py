"""``RedisWorkerMarks`` keeps the worker marks contract (its fake: tests/unit)."""

from __future__ import annotations

import time

import pytest
import redis

from common.config import StoreSettings
from common.keys import RedisKeys
from common.worker_marks import RedisWorkerMarks, WorkerMarks
from tests.contracts.worker_marks import WorkerMarksContract


class TestRedisWorkerMarks(WorkerMarksContract):
    """The contract on the test's own namespace of the shared Redis."""

    @pytest.fixture(autouse=True)
    def _redis(self, redis_client: redis.Redis, namespace: StoreSettings) -> None:
        self._marks = RedisWorkerMarks(redis_client, RedisKeys(namespace.namespace))

    @property
    def marks(self) -> WorkerMarks:
        return self._marks

    def pass_time(self, seconds: float) -> None:
        time.sleep(seconds)
