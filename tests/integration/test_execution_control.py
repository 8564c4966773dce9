"""An operator's view of stuck executions on real MySQL, Redis and RabbitMQ: what each
one's started key says of its run, and the fence failing one sets."""

from __future__ import annotations

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import StoreSettings
from common.errors import ExecutionNotStuckError
from common.keys import RedisKeys
from common.started_marks import OPERATOR, RECONCILER, SEPARATOR, RunState, parse_started
from common.states import ExecutionStatus
from common.topology import declare_core
from services.api.operator.execution_control import (
    ExecutionStores,
    fail_execution,
    list_stuck,
    requeue_execution,
)
from tests.integration.helpers import make_app
from tests.integration.test_rescue import published_results, queued_on

FENCE_TTL_SECONDS = 120


@pytest.fixture
def stores(engine: Engine, redis_client: redis.Redis, namespace: StoreSettings) -> ExecutionStores:
    make_app(engine)
    keys = RedisKeys(namespace.namespace)
    return ExecutionStores(
        engine, redis_client, keys, ClusterClock(redis_client), FENCE_TTL_SECONDS
    )


def test_each_stuck_execution_shows_what_its_started_key_says(stores: ExecutionStores) -> None:
    for execution_id in ("e1", "e2", "e3", "e4", "e5"):
        queued_on(stores.engine, execution_id, "w1")
    started = stores.keys.execution_started
    stores.redis.set(started("e2"), "w1")
    stores.redis.set(started("e3"), "w1" + SEPARATOR + '{"status":"SUCCEEDED"}')
    stores.redis.set(started("e4"), RECONCILER)
    stores.redis.set(started("e5"), OPERATOR)
    runs = {v.execution.execution_id: (v.run, v.run_owner) for v in list_stuck(stores, 0)}
    assert runs == {
        "e1": (RunState.NEVER_STARTED, None),
        "e2": (RunState.RUNNING, "w1"),
        "e3": (RunState.ENDED_UNRECORDED, "w1"),
        "e4": (RunState.SETTLING, RECONCILER),
        "e5": (RunState.SETTLING, OPERATOR),
    }


def test_requeueing_a_started_execution_is_refused(stores: ExecutionStores) -> None:
    queued_on(stores.engine, "e1", "w1")
    stores.redis.set(stores.keys.execution_started("e1"), "w1")
    with pytest.raises(ExecutionNotStuckError, match=r"its run is running \(w1\)"):
        requeue_execution(stores, "e1", actor="tester")


def test_failing_an_execution_fences_it_for_the_fence_ttl_and_reports_it(
    stores: ExecutionStores, connection: BlockingConnection
) -> None:
    declare_core(connection.channel())
    queued_on(stores.engine, "e1", "w1")
    view = fail_execution(
        stores, BatchPublisher(connection.channel()), "e1", "stuck", actor="tester"
    )
    assert view.run == RunState.NEVER_STARTED
    key = stores.keys.execution_started("e1")
    assert parse_started(stores.redis.get(key)) == (OPERATOR, None)
    assert 0 < int(stores.redis.ttl(key)) <= FENCE_TTL_SECONDS
    [result] = published_results(connection)
    assert (result.execution_id, result.status) == ("e1", ExecutionStatus.FAILED)


def test_failing_a_running_execution_leaves_its_workers_key(
    stores: ExecutionStores, connection: BlockingConnection
) -> None:
    declare_core(connection.channel())
    queued_on(stores.engine, "e1", "w1")
    stores.redis.set(stores.keys.execution_started("e1"), "w1")
    fail_execution(stores, BatchPublisher(connection.channel()), "e1", "stuck", actor="tester")
    assert parse_started(stores.redis.get(stores.keys.execution_started("e1"))) == ("w1", None)
