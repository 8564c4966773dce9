"""A worker started under the id of a running one refuses, and leaves the running one be."""

from __future__ import annotations

import pytest
import redis
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.errors import WorkerIdInUseError
from common.stores import Stores
from common.topology import declare_core, declare_worker_queue
from services.worker.id_guard import refuse_if_running


def _stores(namespace: StoreSettings, engine: Engine, client: redis.Redis) -> Stores:
    return Stores.build(namespace, engine, client)


def test_a_second_process_under_a_live_workers_id_is_refused_and_changes_nothing(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> None:
    stores = _stores(namespace, engine, redis_client)
    key = stores.keys.worker("vm-w1")
    redis_client.hset(
        key,
        mapping={
            "state": "ACTIVE",
            "last_heartbeat": stores.clock.now_ms(),
            "hostname": "vm",
            "pid": 4242,
            "incarnation": "first",
        },
    )
    before = redis_client.hgetall(key)
    connection = stores.connect_broker("the running worker")
    try:
        channel = connection.channel()
        declare_core(channel)
        queue = declare_worker_queue(channel, "vm-w1")
        channel.basic_consume(queue, lambda *_: None)
        with pytest.raises(WorkerIdInUseError, match=r"'vm-w1' is already running \(pid 4242"):
            refuse_if_running(stores, "vm-w1")
        assert redis_client.hgetall(key) == before, "the running one's heartbeat is untouched"
        consumers = channel.queue_declare(queue, passive=True).method.consumer_count
        assert consumers == 1, "the running one still consumes its queue"
    finally:
        connection.close()
    refuse_if_running(stores, "vm-w1")  # its connection gone: a restart may take the id


def test_an_id_never_used_is_free(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> None:
    refuse_if_running(_stores(namespace, engine, redis_client), "never-seen")
