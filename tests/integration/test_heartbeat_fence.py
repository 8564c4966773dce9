"""The heartbeat fence on real stores: a heartbeat lands only once both Redis and MySQL
took it, so one that reaches Redis while MySQL refuses it leaves the fence closed."""

from __future__ import annotations

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from services.worker.fence import Fence
from tests.integration.test_worker_serving import RAN, WorkerInThread, wait_for


def test_a_heartbeat_mysql_refuses_does_not_open_the_fence(
    namespace: StoreSettings, redis_client: redis.Redis, engine: Engine
) -> None:
    RAN.clear()
    now = [0.0]
    fence = Fence(interval=1.0, clock=lambda: now[0])
    worker = WorkerInThread(namespace, redis_client, engine, capacity=2, fence=fence)
    worker.thread.start()
    try:
        consumer = wait_for(lambda: worker.serving.consumer, "the worker to consume")
        worker.heartbeat.send()
        now[0] = 2.5  # no heartbeat has landed for longer than two intervals
        worker.send("during", "t.count")
        wait_for(lambda: consumer.waiting == 1, "the delivery to wait at the fence")
        # Redis takes this heartbeat; MySQL fails it (its table is gone for a moment).
        with engine.begin() as conn:
            conn.execute(sa.text("RENAME TABLE workers TO workers_away"))
        try:
            with pytest.raises(sa.exc.DBAPIError):
                worker.heartbeat.send()
        finally:
            with engine.begin() as conn:
                conn.execute(sa.text("RENAME TABLE workers_away TO workers"))
        assert fence.closed, "a heartbeat MySQL refused opened the fence"
        assert RAN == [] and consumer.waiting == 1
        worker.heartbeat.send()  # both take it: the fence opens and the run starts
        assert worker.result("during").status == "SUCCEEDED"
        assert RAN == ["during"]
    finally:
        worker.close()
