"""``WorkerDirectory`` on MySQL and RabbitMQ keeps the live workers contract (its fake:
tests/unit)."""

from __future__ import annotations

import dataclasses

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingConnection
from pika.exceptions import ChannelClosedByBroker
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.db.schema import executions
from common.db.workers import Heartbeat, MySqlWorkerTransactions
from common.loadbalance import WorkerChooser, WorkerLoad, WorkerQueues
from common.states import ExecutionStatus, WorkerState
from common.topology import declare_core, declare_worker_queue, worker_queue
from services.dispatcher.routing.workers import WorkerDirectory
from tests.contracts.live_workers import NOOP, STALE_MS, LiveWorkersContract
from tests.integration.helpers import make_app


class TestWorkerDirectory(LiveWorkersContract):
    """The contract on the test's own database and vhost, the view read afresh each time."""

    @pytest.fixture(autouse=True)
    def _stores(
        self, engine: Engine, redis_client: redis.Redis, connection: BlockingConnection
    ) -> None:
        make_app(engine)
        self._engine = engine
        self._workers = MySqlWorkerTransactions(engine)
        self._clock = ClusterClock(redis_client)
        self._connection = connection
        self._channel = connection.channel()
        declare_core(self._channel)
        self._directory = WorkerDirectory(
            self._workers, connection, self._clock, STALE_MS, ttl=0.0, scarce_ttl=0.0
        )

    @property
    def directory(self) -> WorkerQueues:
        return self._directory

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def heartbeat(
        self,
        worker_id: str,
        handlers: frozenset[str],
        at_ms: int,
        active: int = 0,
        state: WorkerState = WorkerState.ACTIVE,
        avg_ms: int = 0,
    ) -> None:
        beat = Heartbeat(
            worker_id,
            "test",
            1,
            4,
            active,
            100,
            avg_ms,
            tuple(sorted(handlers)),
            state,
            at_ms,
            at_ms,
        )
        with self._workers.transaction() as workers:
            workers.upsert_heartbeat(beat)

    def consume(self, worker_id: str) -> None:
        declare_worker_queue(self._channel, worker_id)
        self._channel.basic_consume(worker_queue(worker_id), lambda *args: None)

    def declare_queue(self, worker_id: str) -> None:
        declare_worker_queue(self._channel, worker_id)

    def queue_exists(self, worker_id: str) -> bool:
        channel = self._connection.channel()
        try:
            channel.queue_declare(worker_queue(worker_id), passive=True)
        except ChannelClosedByBroker:
            return False
        channel.close()
        return True

    def queue_runs(self, worker_id: str, count: int) -> None:
        with self._engine.begin() as conn:
            job = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
            rows = [NewExecution(f"{worker_id}-{n}", job, n, 1_000, 1_000) for n in range(count)]
            insert_executions(conn, [r.queued_on(worker_id) for r in rows], 1_000)

    # The directory's own: its fake takes a fixed queue bound.
    def test_a_worker_that_timed_no_run_shares_a_burst_at_its_peers_pace(self) -> None:
        # One worker ran a run before the burst, the other none yet: the new one must
        # not be held to a run a slot while the other takes the whole burst.
        now = self.now_ms()
        self.heartbeat("ran", NOOP, now, avg_ms=2)
        self.heartbeat("new", NOOP, now)
        self.consume("ran")
        self.consume("new")
        live = self.live()
        assert live["new"].room == live["ran"].room > 4 * 2

    def test_a_flood_of_an_untimed_handler_after_quick_runs_queues_only_what_starts_soon(
        self,
    ) -> None:
        # Quick runs (1 ms) count a second's places in the thousands. A handler nobody has
        # timed must not fill them: the flood's runs would hold every other app's for
        # minutes in the worker's queue, first in, first out.
        now = self.now_ms()
        self._beat("w", now, {"demo.noop": 1})
        self.consume("w")
        chooser = WorkerChooser()
        live = self._directory.live()
        slow = _pick_all(chooser, live, SLOW)
        assert 1 <= slow <= 2 * 4, "a horizon's worth of runs of unknown length, no more"
        # Sent and queued, they hold their places at the next look, quick runs refused too.
        self.queue_runs("w", slow)
        live = self._directory.live()
        assert _pick_all(chooser, live, SLOW) == 0
        assert chooser.choose(live, "demo.noop") is None
        # Timed at last (500 ms a run), and gone from the queue: a turnover of them goes.
        self._beat("w", self.now_ms(), {"demo.noop": 1, SLOW: 500})
        with self._engine.begin() as conn:
            conn.execute(sa.update(executions).values(status=ExecutionStatus.SUCCEEDED))
        assert 4 <= _pick_all(chooser, self._directory.live(), SLOW) <= 4 + 12

    def _beat(self, worker_id: str, at_ms: int, handler_ms: dict[str, int]) -> None:
        handlers = ("demo.noop", SLOW)
        beat = Heartbeat(
            worker_id, "test", 1, 4, 0, 100, 1, handlers, WorkerState.ACTIVE, at_ms, at_ms
        )
        with self._workers.transaction() as workers:
            workers.upsert_heartbeat(dataclasses.replace(beat, handler_ms=handler_ms))


SLOW = "demo.slow"


def _pick_all(chooser: WorkerChooser, live: list[WorkerLoad], handler: str) -> int:
    picked = 0
    while chooser.choose(live, handler) is not None:
        picked += 1
    return picked
