"""What a claim hands the firer for the executions it wrote SCHEDULED is what MySQL
holds for them: the firer fires on those rows without reading them back."""

from __future__ import annotations

import dataclasses
import queue

import redis
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db import executions_with_job
from common.db.jobs import JobPolicies, NewJob, insert_job
from common.loadbalance import WorkerChooser, WorkerLoad
from common.memory.broker import MemoryBroker, MemoryPublisher
from common.schedule import MisfirePolicy, OverlapPolicy
from common.topology import declare_core, declare_worker_queue
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender
from tests.integration.helpers import make_app

HANDLERS = frozenset({"demo.noop", "demo.sleep"})


def add_job(engine: Engine, app_pk: int, trigger: int, **fields: object) -> int:
    policies = JobPolicies(**fields.pop("policies", {}))  # type: ignore[arg-type]
    job = NewJob(app_pk, "j", "demo.noop", {"n": 1}, None, trigger, None, None, None, policies)
    job = dataclasses.replace(job, **fields)  # type: ignore[arg-type]
    with engine.begin() as conn:
        return insert_job(conn, job, 0)


def test_the_rows_a_claim_hands_over_are_those_mysql_holds(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    add_job(engine, 1, now - 50)
    add_job(engine, 1, now - 40, priority=9, handler="demo.sleep")
    add_job(engine, 1, now - 30, cron_expr="* * * * *")
    add_job(
        engine,
        1,
        now - 20,
        params={"big": "x" * 300},
        policies={
            "overlap_policy": OverlapPolicy.QUEUE,
            "misfire_policy": MisfirePolicy.SKIP,
            "misfire_threshold_seconds": 7,
            "timeout_seconds": 30,
        },
    )
    add_job(engine, 1, now + 500)  # due within the claim's window, not yet
    sender = ClaimSender(WorkerChooser())  # no live worker: nothing is sent
    claimer = TriggerClaimer(engine, ClusterClock(redis_client), 100, 1_000, sender)
    assert claimer.claim(HANDLERS) == 5
    handed = sender.take_scheduled()
    with engine.connect() as conn:
        stored = executions_with_job.scheduled_until(conn, now + 60_000, 100)
    assert len(stored) == 5
    assert sorted(handed, key=lambda r: r.id) == sorted(stored, key=lambda r: r.id)
    assert sender.take_scheduled() == []


def test_a_claim_hands_over_only_what_it_did_not_send(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    for n in range(5):
        add_job(engine, 1, now - 10 - n)
    sender = ClaimSender(WorkerChooser())
    # Room for two runs in w1's queue: the claim sends two and writes three SCHEDULED.
    sender.workers = (WorkerLoad("w1", 0, 0.0, 100.0, HANDLERS, room=2),)
    claimer = TriggerClaimer(engine, ClusterClock(redis_client), 100, 1_000, sender)
    assert claimer.claim(HANDLERS) == 5
    assert sender.take_scheduled() == [], "handed over only once the claim commits"
    try:
        open_claim = sender._ready.get_nowait()
    except queue.Empty:
        raise AssertionError("the claim sent nothing") from None
    broker = MemoryBroker()
    declare_core(broker)
    declare_worker_queue(broker, "w1")
    assert open_claim.send(MemoryPublisher(broker)) == 2
    handed = sender.take_scheduled()
    with engine.connect() as conn:
        stored = executions_with_job.scheduled_until(conn, now + 60_000, 100)
    assert len(handed) == 3
    assert sorted(handed, key=lambda r: r.id) == sorted(stored, key=lambda r: r.id)


def test_a_claim_rolled_back_hands_nothing_over(engine: Engine, redis_client: redis.Redis) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    for n in range(3):
        add_job(engine, 1, now - 10 - n)
    sender = ClaimSender(WorkerChooser())
    sender.workers = (WorkerLoad("w1", 0, 0.0, 100.0, HANDLERS, room=1),)
    claimer = TriggerClaimer(engine, ClusterClock(redis_client), 100, 1_000, sender)
    assert claimer.claim(HANDLERS) == 3
    sender._ready.get_nowait().abandon()
    assert sender.take_scheduled() == []
