"""An operator's drain request: refused for a worker that is not running, taken by a
live worker's next heartbeat (and by that one only)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest
import redis
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.consumer.stats import ConsumerStats
from common.errors import WorkerNotLiveError
from common.keys import RedisKeys
from common.states import WorkerState
from common.stores import Stores
from services.api.operator.worker_control import request_drain
from services.worker.heartbeat import Heartbeater, HeartbeatHooks, Load, WorkerIdentity
from tests.integration.helpers import register_worker


@dataclass
class Idle:
    """A worker's load source with nothing running."""

    stats: ConsumerStats = field(default_factory=ConsumerStats)

    def load(self) -> Load:
        return Load(0, 0)

    def held(self) -> int:
        return 0

    def running_for(self, now: float) -> dict[str, float]:
        return {}


def test_a_drain_request_is_taken_by_the_next_heartbeat_and_stops_the_worker(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> None:
    keys, clock = RedisKeys(namespace.namespace), ClusterClock(redis_client)
    stores = Stores(namespace, engine, redis_client, keys, clock)
    stop = threading.Event()
    identity = WorkerIdentity("w1", 2, ("demo.noop",))
    heartbeat = Heartbeater(identity, Idle(), stores, 60, HeartbeatHooks(on_drain=stop.set))
    redis_client.set(keys.worker_drain("w1"), "meant for an earlier process")
    heartbeat.start()
    assert not stop.is_set(), "a request left from before the process started is dropped"

    request_drain(stores, "w1", 15_000, "alice")
    assert stores.worker_marks().stops_requested(["w1", "w2"]) == {"w1"}
    heartbeat.send()
    assert stop.is_set()
    assert stores.worker_marks().stops_requested(["w1"]) == set()
    heartbeat.stop(WorkerState.STOPPED)


@pytest.mark.parametrize(
    ("state", "heard_ms_ago", "why"),
    [
        (WorkerState.STOPPED, 0, "it is STOPPED"),
        (WorkerState.DRAINING, 0, "it is DRAINING"),
        (WorkerState.ACTIVE, 60_000, "it has not sent a heartbeat for 60 s"),
    ],
)
def test_a_worker_that_is_not_running_cannot_be_asked_to_drain(
    engine: Engine,
    redis_client: redis.Redis,
    namespace: StoreSettings,
    state: WorkerState,
    heard_ms_ago: int,
    why: str,
) -> None:
    stores = Stores.build(namespace, engine, redis_client)
    clock = stores.clock
    register_worker(engine, "w1", clock.now_ms() - heard_ms_ago, state=state)
    with pytest.raises(WorkerNotLiveError, match=why):
        request_drain(stores, "w1", 15_000, "alice")
    with pytest.raises(WorkerNotLiveError, match="no worker has that id"):
        request_drain(stores, "w9", 15_000, "alice")
    assert stores.worker_marks().stops_requested(["w1", "w9"]) == set()
