"""A lone dispatcher that stepped down (its dispatch loop stalled) leads again promptly,
on real MySQL, Redis and RabbitMQ; while it cannot, ``/readyz`` says so."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import connect
from common.clock import ClusterClock
from common.config import DispatcherSettings, StoreSettings
from common.db.jobs import NewJob, insert_job
from common.runtime import ServiceStop
from common.topology import declare_core, declare_worker_queue, worker_queue
from services.dispatcher import main as dispatcher_main
from services.dispatcher.leadership.lease_thread import Leadership
from services.dispatcher.main import Dispatcher
from services.dispatcher.trigger.fire import Firer
from tests.e2e.harness import wait_until
from tests.integration.helpers import make_app, register_worker

# A lease of 3 s: renewed every second, given up after a 2 s stall.
LEASE_TTL_MS = 3_000
# "Promptly": within a few lease lifetimes of the step-down, on a busy machine.
LEAD_AGAIN_S = 4 * LEASE_TTL_MS / 1000
# How long the held pass may last at most, should the test fail before releasing it.
HOLD_MAX_S = 60.0


@dataclass
class LongPass:
    """The first lead's dispatch pass goes on long past the stall bound.

    Its first fire is held (a statement waiting) until ``released`` is set; with
    ``trickle``, only until the dispatcher has stepped down, and the fires after it
    each report a run sent, as a backlog trickling out batch after batch would, until
    ``released``. Every later lead fires as usual.
    """

    trickle: bool = False
    released: threading.Event = field(default_factory=threading.Event)
    leadership: Leadership | None = None
    first: object | None = None
    held_fires: int = 0

    def fire(self, firer: Firer, fire_due: Callable[[], int]) -> int:
        if self.first is None:
            self.first = firer
        if firer is not self.first or self.released.is_set():
            return fire_due()
        self.held_fires += 1
        if self.held_fires == 1:
            self._hold()
            return 1 if self.trickle else 0
        if not self.trickle:
            return fire_due()
        time.sleep(0.05)
        return 1

    def _hold(self) -> None:
        deadline = time.monotonic() + HOLD_MAX_S
        while not self.released.wait(0.01) and time.monotonic() < deadline:
            if self.trickle and self._stepped_down():
                return

    def _stepped_down(self) -> bool:
        return self.leadership is not None and not self.leadership.is_leader.is_set()


def firer_with(long_pass: LongPass) -> type[Firer]:
    class LongPassFirer(Firer):
        def fire_due(self) -> int:
            return long_pass.fire(self, super().fire_due)

    return LongPassFirer


@dataclass
class Running:
    dispatcher: Dispatcher
    stop: ServiceStop
    long_pass: LongPass


@pytest.fixture
def worker_queue_consumed(namespace: StoreSettings) -> Iterator[BlockingConnection]:
    """Worker w1's queue with a consumer on it, as a live worker's would have."""
    opened = connect(namespace, "test worker")
    channel = opened.channel()
    declare_core(channel)
    declare_worker_queue(channel, "w1")
    channel.basic_consume(worker_queue("w1"), lambda *_: None)
    yield opened
    opened.close()


@pytest.fixture
def long_lead(
    request: pytest.FixtureRequest,
    namespace: StoreSettings,
    engine: Engine,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    worker_queue_consumed: BlockingConnection,
) -> Iterator[Running]:
    """A dispatcher whose first lead stalls in one fire; then, as the test's parameter
    (``TRICKLING`` or ``HUNG``) says, it fires on and on, or hangs until the test
    releases it."""
    long_pass = LongPass(trickle=request.param)
    make_app(engine)
    register_worker(engine, now_ms=ClusterClock(redis_client).now_ms())
    monkeypatch.setattr(dispatcher_main, "Firer", firer_with(long_pass))
    settings = DispatcherSettings(
        namespace=namespace.namespace,
        dispatcher_id="d1",
        lease_ttl_ms=LEASE_TTL_MS,
        heartbeat_stale_ms=600_000,
        retention_days=0,
    )
    stop = ServiceStop()
    dispatcher = Dispatcher(settings, stop)
    long_pass.leadership = dispatcher.leadership
    thread = threading.Thread(target=dispatcher.run, name="dispatcher", daemon=True)
    thread.start()
    try:
        yield Running(dispatcher, stop, long_pass)
    finally:
        long_pass.released.set()
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the dispatcher did not stop"


TRICKLING = pytest.mark.parametrize("long_lead", [True], indirect=True, ids=["trickling"])
HUNG = pytest.mark.parametrize("long_lead", [False], indirect=True, ids=["hung"])


def add_due_job(engine: Engine, redis_client: redis.Redis) -> int:
    now = ClusterClock(redis_client).now_ms()
    job = NewJob(1, "j", "demo.noop", {}, None, now - 10, None, None, None)
    with engine.begin() as conn:
        return insert_job(conn, job, now)


def dispatched_to(engine: Engine, job_id: int) -> str | None:
    """The worker the job's run went to, once it went."""
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT worker_id FROM executions WHERE job_id = :j AND status = 'QUEUED'"),
            {"j": job_id},
        ).scalar()
    return None if found is None else str(found)


def step_down(running: Running) -> float:
    """Wait for the first lead and its step-down; return when it stepped down."""
    leadership = running.dispatcher.leadership
    assert leadership.is_leader.wait(20), "the dispatcher never led"
    wait_until(lambda: running.long_pass.held_fires, 20, what="the long pass")
    wait_until(lambda: not leadership.is_leader.is_set(), 20, 0.01, what="the step-down")
    return time.monotonic()


@TRICKLING
def test_a_dispatcher_that_stepped_down_in_a_long_pass_leads_again_and_dispatches(
    long_lead: Running, engine: Engine, redis_client: redis.Redis
) -> None:
    stepped_down = step_down(long_lead)
    leadership = long_lead.dispatcher.leadership
    assert leadership.is_leader.wait(LEAD_AGAIN_S), (
        f"no lead again within {LEAD_AGAIN_S} s of the step-down: the pass went on as if leading"
    )
    assert time.monotonic() - stepped_down < LEAD_AGAIN_S
    job_id = add_due_job(engine, redis_client)
    assert wait_until(lambda: dispatched_to(engine, job_id), 20, what="the run sent") == "w1"


@HUNG
def test_a_lead_that_cannot_wind_down_is_reported_not_ready_and_leads_once_back(
    long_lead: Running, engine: Engine, redis_client: redis.Redis
) -> None:
    step_down(long_lead)
    health = long_lead.stop.health

    def not_ready() -> str | None:
        ready, checks = health.readiness()
        return None if ready else checks.get("leadership")

    why = wait_until(not_ready, LEAD_AGAIN_S, what="/readyz to say it cannot lead")
    assert "dispatch loop" in why and "lease" in why
    assert not long_lead.dispatcher.leadership.is_leader.is_set()
    long_lead.long_pass.released.set()
    assert long_lead.dispatcher.leadership.is_leader.wait(LEAD_AGAIN_S), "no lead once back"
    wait_until(lambda: health.readiness()[0], LEAD_AGAIN_S, what="/readyz ready again")
    job_id = add_due_job(engine, redis_client)
    assert wait_until(lambda: dispatched_to(engine, job_id), 20, what="the run sent") == "w1"
