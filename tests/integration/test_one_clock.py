"""Due checks read the cluster clock (Redis TIME), not the dispatcher host's own: a host
an hour off neither fires a job an hour early nor holds one an hour late."""

from __future__ import annotations

import time

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.jobs import NewJob, insert_job
from common.loadbalance import WorkerChooser
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender
from tests.integration.helpers import make_app

HOUR_MS = 3_600_000


class SkewedRedis:
    """Redis whose TIME is ``skew_ms`` away from this host's wall clock (the host is the
    one that is off, as far as the cluster is concerned)."""

    def __init__(self, skew_ms: int) -> None:
        self._skew_ms = skew_ms

    def time(self) -> tuple[int, int]:
        now_us = int(time.time() * 1_000_000) + self._skew_ms * 1000
        return now_us // 1_000_000, now_us % 1_000_000


def claim_with_skew(engine: Engine, skew_ms: int) -> int:
    clock = ClusterClock(SkewedRedis(skew_ms))  # type: ignore[arg-type]
    return TriggerClaimer(engine, clock, 100, 1_000, ClaimSender(WorkerChooser())).claim(
        {"demo.noop"}
    )


def executions(engine: Engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(sa.text("SELECT job_id FROM executions")).scalars())


def test_a_job_due_by_the_cluster_clock_is_claimed_whatever_the_host_says(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    host_now = int(time.time() * 1000)
    with engine.begin() as conn:
        later = insert_job(
            conn,
            NewJob(1, "later", "demo.noop", {}, None, host_now + HOUR_MS // 2, None, None, None),
            0,
        )
    # The cluster is an hour ahead of this host: the job is due by the cluster's time.
    assert claim_with_skew(engine, HOUR_MS) == 1
    assert executions(engine) == {later}


def test_a_job_not_due_by_the_cluster_clock_waits_whatever_the_host_says(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    host_now = int(time.time() * 1000)
    with engine.begin() as conn:
        insert_job(
            conn, NewJob(1, "now", "demo.noop", {}, None, host_now - 1_000, None, None, None), 0
        )
    # The cluster is an hour behind this host: by its time the job is not due yet.
    assert claim_with_skew(engine, -HOUR_MS) == 0
    assert executions(engine) == set()
