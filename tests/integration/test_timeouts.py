"""The leader's timeout scan finds runs past their job's timeout that no worker reported."""

from __future__ import annotations

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.executions import NewExecution, insert_executions, mark_queued, primary_keys
from common.db.executions_with_job import overdue
from common.db.jobs import JobPolicies, NewJob, insert_job
from common.keys import RedisKeys
from common.messages import ResultBatch
from common.stores import Stores
from common.topology import RESULTS_QUEUE, declare_core
from services.dispatcher.upkeep import timeouts as timeouts_module
from services.dispatcher.upkeep.timeouts import Timeouts, TimeoutSettings, time_out_overdue
from tests.integration.helpers import make_app


def queued_job(engine: Engine, name: str, timeout: int | None, dispatched_at: int) -> None:
    policies = JobPolicies(timeout_seconds=timeout)
    with engine.begin() as conn:
        job_id = insert_job(
            conn, NewJob(1, name, "demo.sleep", {}, None, 0, None, None, None, policies), 0
        )
        insert_executions(conn, [NewExecution(name, job_id, 1, 0, 0)], 0)
        mark_queued(conn, dict.fromkeys(primary_keys(conn, [name]), "w1"), dispatched_at)


def test_only_runs_past_timeout_plus_grace_are_overdue(engine: Engine) -> None:
    make_app(engine)
    queued_job(engine, "late", timeout=10, dispatched_at=1_000)
    queued_job(engine, "in-grace", timeout=10, dispatched_at=20_000)
    queued_job(engine, "no-timeout", timeout=None, dispatched_at=1_000)
    with engine.connect() as conn:
        found = {r.execution_id for r in overdue(conn, now_ms=35_000, grace_ms=5_000, limit=10)}
    assert found == {"late"}


TTL_MS = 60_000


def timed_out_by_sweep(
    engine: Engine, redis_client: redis.Redis, connection: BlockingConnection, ns: StoreSettings
) -> set[str]:
    stores = Stores.build(ns, engine, redis_client)
    channel = connection.channel()
    declare_core(channel)
    time_out_overdue(stores, BatchPublisher(connection.channel()), TimeoutSettings(5_000, TTL_MS))
    found: set[str] = set()
    while True:
        method, _props, body = channel.basic_get(RESULTS_QUEUE, auto_ack=True)
        if method is None:
            return found
        batch = ResultBatch.model_validate_json(body)
        assert {r.status for r in batch.results} == {"TIMED_OUT"}
        found.update(r.execution_id for r in batch.results)


def test_the_timeout_counts_from_the_start_a_worker_took_not_from_dispatch(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
) -> None:
    make_app(engine)
    keys = RedisKeys(namespace.namespace)
    now = ClusterClock(redis_client).now_ms()
    for name in ("started-now", "started-long-ago", "waiting", "waiting-very-long", "ended"):
        dispatched = now - (300_000 if name == "waiting-very-long" else 60_000)
        queued_job(engine, name, timeout=10, dispatched_at=dispatched)
    started = keys.execution_started
    redis_client.set(started("started-now"), "w1", px=TTL_MS)
    redis_client.set(started("started-long-ago"), "w1", px=TTL_MS - 40_000)
    redis_client.set(started("ended"), 'w1\n{"status": "SUCCEEDED"}', px=TTL_MS - 40_000)
    found = timed_out_by_sweep(engine, redis_client, connection, namespace)
    assert found == {"started-long-ago", "waiting-very-long"}


def test_candidates_not_due_yet_never_hide_the_overdue_ones_behind_them(
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    namespace: StoreSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timeouts_module, "SWEEP_LIMIT", 2)
    make_app(engine)
    keys = RedisKeys(namespace.namespace)
    now = ClusterClock(redis_client).now_ms()
    for n in range(3):  # a backlog no worker has started yet, dispatched first
        queued_job(engine, f"waiting-{n}", timeout=10, dispatched_at=now - 60_000 + n)
    queued_job(engine, "hung", timeout=10, dispatched_at=now - 50_000)
    redis_client.set(keys.execution_started("hung"), "w1", px=TTL_MS - 45_000)
    stores = Stores.build(namespace, engine, redis_client)
    channel = connection.channel()
    declare_core(channel)
    sweep = Timeouts(stores, BatchPublisher(connection.channel()), TimeoutSettings(5_000, TTL_MS))
    for _ in range(3):
        sweep.sweep()
    method, _props, body = channel.basic_get(RESULTS_QUEUE, auto_ack=True)
    assert method is not None
    assert [r.execution_id for r in ResultBatch.model_validate_json(body).results] == ["hung"]
