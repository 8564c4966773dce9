"""Claims that send what is already due, on real MySQL and RabbitMQ."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest
import redis
import sqlalchemy as sa
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, connect
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import JobPolicies, NewJob, insert_job
from common.loadbalance import WorkerChooser, WorkerLoad
from common.messages import DispatchPack, ExecutionResult
from common.schedule import OverlapPolicy
from common.states import ExecutionStatus
from common.topology import declare_core, declare_worker_queue, worker_queue
from services.dispatcher.outcomes.recording import record_results
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender, OpenClaim
from tests.books import Expectation, assert_books
from tests.e2e.harness import wait_until
from tests.integration.helpers import make_app, sessions_waiting_for_a_lock

W1 = WorkerLoad("w1", 0, 0.0, 100.0, frozenset({"demo.noop"}))


@pytest.fixture
def channel(namespace: StoreSettings) -> Iterator[BlockingChannel]:
    connection: BlockingConnection = connect(namespace, "test")
    opened = connection.channel()
    declare_core(opened)
    declare_worker_queue(opened, "w1")
    yield opened
    connection.close()


class Claims:
    """A claimer with a sender whose open claims the test takes instead of a dispatch loop."""

    def __init__(self, engine: Engine, client: redis.Redis) -> None:
        self.sender = ClaimSender(WorkerChooser())
        self.sender.workers = (W1,)
        self.claimer = TriggerClaimer(engine, ClusterClock(client), 500, 60_000, self.sender)

    def claim(self) -> OpenClaim | None:
        self.claimer.claim({"demo.noop"})
        try:
            return self.sender._ready.get_nowait()
        except queue.Empty:
            return None


def add_job(
    engine: Engine, trigger: int, cron: str | None = None, overlap: OverlapPolicy | None = None
) -> int:
    policies = JobPolicies(overlap_policy=overlap) if overlap else JobPolicies()
    job = NewJob(1, "j", "demo.noop", {"n": 1}, cron, trigger, None, None, None, policies)
    with engine.begin() as conn:
        return insert_job(conn, job, 0)


def rows(engine: Engine) -> dict[int, tuple[str, str, str | None, int | None]]:
    """job id -> (execution id, status, worker, dispatched_at)."""
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT job_id, execution_id, status, worker_id, dispatched_at FROM executions")
        ).all()
    return {int(r[0]): (str(r[1]), str(r[2]), r[3], r[4]) for r in found}


def queued_messages(channel: BlockingChannel) -> list[dict[str, object]]:
    """The executions in the dispatch messages queued for w1, in order."""
    found: list[dict[str, object]] = []
    while True:
        method, _props, body = channel.basic_get(worker_queue("w1"), auto_ack=True)
        if method is None:
            return found
        found.extend(m.model_dump() for m in DispatchPack.model_validate_json(body).executions)


def test_a_due_trigger_goes_queued_in_its_claim_and_commits_after_the_publish(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    due, later = add_job(engine, now - 10), add_job(engine, now + 30_000)
    claims = Claims(engine, redis_client)
    open_claim = claims.claim()
    assert open_claim is not None
    assert rows(engine) == {}  # nothing committed before the publish
    # A second claim meanwhile passes over the jobs the open claim holds.
    assert Claims(engine, redis_client).claim() is None
    assert open_claim.send(BatchPublisher(channel.connection.channel())) == 1
    found = rows(engine)
    assert found[due][1:3] == ("QUEUED", "w1") and found[due][3] is not None
    assert found[later][1:3] == ("SCHEDULED", None)
    [message] = queued_messages(channel)
    assert message["execution_id"] == found[due][0]
    assert message["params"] == {"n": 1}
    with engine.connect() as conn:
        key = conn.execute(
            sa.text("SELECT id FROM executions WHERE job_id = :j"), {"j": due}
        ).scalar()
    assert message["ref"] == key
    with engine.connect() as conn:
        app = conn.execute(sa.text("SELECT app_pk FROM jobs WHERE id = :j"), {"j": due}).scalar()
    assert message["app"] == app  # for the worker's run-log quota


def claimed_twice(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel, publish_first: bool
) -> tuple[int, int]:
    """A due job whose first claim rolled back and whose second was sent and committed;
    returns the job id and the row key the first claim had given its execution."""
    make_app(engine)
    job_id = add_job(engine, ClusterClock(redis_client).now_ms() - 10)
    claims = Claims(engine, redis_client)
    first = claims.claim()
    assert first is not None
    if publish_first:
        BatchPublisher(channel.connection.channel()).publish(first.packs.messages)
    first.abandon()  # as if MySQL went away between the broker's commit and its own
    assert rows(engine) == {}
    second = claims.claim()
    assert second is not None
    assert second.send(BatchPublisher(channel.connection.channel())) == 1
    return job_id, first.sent[0].execution_key


def test_a_claim_rolled_back_after_its_publish_sends_the_same_execution_again(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel
) -> None:
    job_id, _stale_key = claimed_twice(engine, redis_client, channel, publish_first=True)
    orphan, copy = queued_messages(channel)
    assert orphan["execution_id"] == copy["execution_id"] == rows(engine)[job_id][0]
    assert orphan["ref"] != copy["ref"]  # the first key was rolled back with its row


def test_a_result_carrying_a_rolled_back_key_is_recorded_by_execution_id(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel
) -> None:
    job_id, stale_key = claimed_twice(engine, redis_client, channel, publish_first=False)
    execution_id = rows(engine)[job_id][0]
    result = ExecutionResult(
        execution_id=execution_id,
        job_id=job_id,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=1,
        ended_at=2,
        ref=stale_key,
    )
    record_results(engine, ClusterClock(redis_client), [result])
    assert rows(engine)[job_id][1] == "SUCCEEDED"
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=0)


@pytest.mark.parametrize("other", ["QUEUED", "SCHEDULED"])
def test_a_forbid_trigger_due_beside_another_run_is_left_to_the_firer(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel, other: str
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    job_id = add_job(engine, now - 10, cron="* * * * * *", overlap=OverlapPolicy.FORBID)
    with engine.begin() as conn:
        running = NewExecution("e-other", job_id, 1, now - 1_000, now - 1_000)
        insert_executions(conn, [running], now)
        conn.execute(sa.text("UPDATE executions SET status = :s"), {"s": other})
    assert Claims(engine, redis_client).claim() is None  # nothing to send: committed
    with engine.connect() as conn:
        claimed = conn.execute(
            sa.text("SELECT status FROM executions WHERE execution_id != 'e-other'")
        ).scalar()
    # The firer, the one place that decides overlaps, skips or runs it at fire time.
    assert claimed == ExecutionStatus.SCHEDULED
    assert queued_messages(channel) == []


def test_a_result_with_a_rolled_back_key_waits_for_the_claim_still_open_with_it(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel
) -> None:
    make_app(engine)
    job_id = add_job(engine, ClusterClock(redis_client).now_ms() - 10)
    claims = Claims(engine, redis_client)
    first = claims.claim()
    assert first is not None
    first.abandon()
    second = claims.claim()  # open: its row is not committed yet
    assert second is not None
    result = ExecutionResult(
        execution_id=second.sent[0].execution_id,
        job_id=job_id,
        worker_id="w1",
        status=ExecutionStatus.SUCCEEDED,
        started_at=1,
        ended_at=2,
        ref=first.sent[0].execution_key,
    )
    recording = threading.Thread(
        target=record_results, args=(engine, ClusterClock(redis_client), [result])
    )
    recording.start()
    wait_until(
        lambda: sessions_waiting_for_a_lock(engine) == 1, 30, what="the result to wait for the row"
    )
    assert recording.is_alive()  # waiting on the open claim's row, not dropping the result
    second.send(BatchPublisher(channel.connection.channel()))
    recording.join(timeout=10)
    assert rows(engine)[job_id][1] == "SUCCEEDED"
    assert_books(engine, Expectation([job_id], execution_statuses={"SUCCEEDED"}), timeout=0)


def test_a_claim_handed_over_after_the_lead_ended_is_rolled_back(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    job_id = add_job(engine, ClusterClock(redis_client).now_ms() - 10)
    claims = Claims(engine, redis_client)
    claims.sender.close()
    assert claims.claimer.claim({"demo.noop"}) == 0  # handed over to nobody: rolled back
    assert rows(engine) == {}
    fresh = Claims(engine, redis_client)
    again = fresh.claim()  # the job was left claimable, not locked for good
    assert again is not None and again.sent[0].job_id == job_id
    again.abandon()


def test_a_due_trigger_that_already_has_its_execution_does_not_stop_the_batch(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    taken, free = add_job(engine, now - 10), add_job(engine, now - 10)
    with engine.begin() as conn:  # claimed before, under another schedule
        insert_executions(conn, [NewExecution("e-before", taken, 1, now - 10, now - 10)], now)
    open_claim = Claims(engine, redis_client).claim()
    assert open_claim is not None
    assert [a.job_id for a in open_claim.sent] == [free]
    assert open_claim.send(BatchPublisher(channel.connection.channel())) == 1
    assert rows(engine)[taken][0] == "e-before"


@pytest.mark.parametrize(
    "change", ["max_running = 2", "disabled_at = 1"], ids=["capped", "disabled"]
)
def test_an_apps_cap_or_disable_set_just_before_holds_for_the_claims_first_runs(
    engine: Engine, redis_client: redis.Redis, channel: BlockingChannel, change: str
) -> None:
    make_app(engine)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE apps SET {change}"))
    now = ClusterClock(redis_client).now_ms()
    job_id = add_job(engine, now - 10)
    # The claim sends nothing of the app: the firer applies its cap or its fence.
    assert Claims(engine, redis_client).claim() is None
    assert rows(engine)[job_id][1] == ExecutionStatus.SCHEDULED
    assert queued_messages(channel) == []
