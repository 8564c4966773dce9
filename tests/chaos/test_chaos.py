"""Chaos: a burst of jobs, a fault in the middle of it, and then the books.

Each scenario starts the whole stack (API, two dispatchers, three workers, notifier),
submits a burst of one-shot jobs (a third with callbacks; each may be retried), injects
its fault while the burst runs, lets the system settle and then go quiet (no message in
any queue, workers and notifier stopped), and holds the books against two witnesses
outside Kairos: every job SUCCEEDED, every execution final, exactly one side effect per
job in the handlers' ledger, each SUCCEEDED execution's among them, none of an
execution never scheduled, and every DELIVERED callback received under its
``webhook-id`` (copies counted, bounded by the POSTs recorded). The table printed at
the end shows each scenario's figures.

``make test`` runs them all: the ten that restart no server after the e2e tier, and
the three ``serial`` ones, which restart the machine's MariaDB, Redis and RabbitMQ, in
the last call, alone, with the serial e2e tests (``short``: the quickest three).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from tests.books import FINAL_EXECUTIONS, Books, Expectation, read_books
from tests.chaos import faults
from tests.chaos.conftest import OUTCOMES, Outcome
from tests.chaos.stack import DISPATCHERS, ChaosStack, start_worker
from tests.e2e.harness import CallbackReceiver, Processes, wait_until

SETTLE_SECONDS = 150
KAIROS = str(Path(sys.executable).parent / "kairos")

pytestmark = pytest.mark.timeout(360)
# A dead worker's work moves to live workers within this long of its death.
MOVE_SECONDS = 20

Fault = Callable[[ChaosStack, Engine], None]


def run_scenario(
    name: str,
    stack: ChaosStack,
    engine: Engine,
    fault: Fault,
    count: int = 300,
    seconds: float = 0.05,
    over_ms: int = 6_000,
    extra_posts: int = 0,
    execution_statuses: Collection[str] = FINAL_EXECUTIONS,
) -> Books:
    """Burst, fault once a sixth of it did its work, settle, go quiet, check the books
    against the ledger and the callback receiver. ``extra_posts``: POSTs of one callback
    the fault may leave unrecorded (it cuts the notifier off MySQL or the broker)."""
    job_ids = stack.submit_burst(count, over_ms=over_ms, seconds=seconds)
    wait_until(lambda: len(stack.ledger().effects) >= count // 6, 120, what="the burst to run")
    began = time.monotonic()
    fault(stack, engine)
    settled = stack.settle(engine, job_ids, SETTLE_SECONDS)
    recovered = time.monotonic() - began
    assert not settled.problems, settled.summary()
    stack.quiesce()
    expected = Expectation(
        job_ids, execution_statuses=execution_statuses, callback_attempts=1 + extra_posts
    )
    books = read_books(engine, expected, witnesses=stack.witnesses(extra_posts))
    ledger = stack.ledger()
    per_job = Counter(e.job_id for e in ledger.effects)
    succeeded = sum(1 for status in books.jobs.values() if status == "SUCCEEDED")
    OUTCOMES.append(
        Outcome(
            name,
            len(job_ids),
            succeeded,
            sum(1 for j in job_ids if per_job[j] == 0),
            sum(1 for j in job_ids if per_job[j] > 1),
            books.callback_copies,
            recovered,
        )
    )
    # A run recorded LOST may have had its effect before its worker died (README, "What
    # a handler must do"): each such run may add one; every other effect is one per job.
    lost = lost_per_job(engine)
    assert {j: per_job[j] for j in job_ids if not 1 <= per_job[j] <= 1 + lost[j]} == {}, (
        "not one effect per job (and one more per LOST run at most)"
    )
    assert not books.problems, books.summary()
    assert ledger.execution_ids <= scheduled_ids(engine), "a side effect of no execution"
    return books


def lost_per_job(engine: Engine) -> Counter[int]:
    """How many of each job's executions were recorded LOST."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT job_id, COUNT(*) FROM executions WHERE status = 'LOST' GROUP BY job_id")
        )
        return Counter({int(job): int(n) for job, n in rows})


def scheduled_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {str(r[0]) for r in conn.execute(sa.text("SELECT execution_id FROM executions"))}


def executions_on(engine: Engine, worker: str, statuses: tuple[str, ...]) -> set[str]:
    """The ids of the executions on ``worker`` in one of ``statuses``."""
    statement = sa.text(
        "SELECT execution_id FROM executions WHERE worker_id = :w AND status IN :s"
    ).bindparams(sa.bindparam("s", expanding=True))
    with engine.connect() as conn:
        return {str(r[0]) for r in conn.execute(statement, {"w": worker, "s": list(statuses)})}


# The recall's log line (services/dispatcher/upkeep/recall.py), one per pass that took
# runs back from a worker's queue.
RECALL_LINE = re.compile(r"worker (\S+) held \d+ places .*?: (\d+) unstarted runs taken back")


def recalled_from(stack: ChaosStack, worker: str) -> int:
    """How many runs the dispatchers' logs say were recalled from ``worker``'s queue."""
    return sum(
        int(match.group(2))
        for dispatcher in DISPATCHERS
        for match in RECALL_LINE.finditer(stack.processes.log(dispatcher))
        if match.group(1) == worker
    )


def heartbeat_age_ms(engine: Engine, worker: str) -> int:
    """How long ago ``worker``'s last heartbeat landed in MySQL, by MySQL's clock."""
    with engine.connect() as conn:
        age = conn.execute(
            sa.text(
                "SELECT UNIX_TIMESTAMP(NOW(3)) * 1000 - last_heartbeat FROM workers "
                "WHERE worker_id = :w"
            ),
            {"w": worker},
        ).scalar_one()
    return int(age)


def queued_on(engine: Engine, worker: str) -> int:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text("SELECT COUNT(*) FROM executions WHERE worker_id = :w AND status = 'QUEUED'"),
            {"w": worker},
        )
        return int(found.scalar_one())


@pytest.fixture
def stack(processes: Processes, namespace: StoreSettings, receiver: CallbackReceiver) -> ChaosStack:
    return ChaosStack.start(processes, namespace, receiver)


def kill_worker_mid_run(stack: ChaosStack, engine: Engine) -> None:
    wait_until(lambda: queued_on(engine, "w1"), 10, what="work on w1")
    stack.processes.signal("w1", signal.SIGKILL)
    began = time.monotonic()
    wait_until(lambda: queued_on(engine, "w1") == 0, MOVE_SECONDS, what="w1's work to move")
    print(f"w1's work moved in {time.monotonic() - began:.1f} s")


@pytest.mark.short
def test_a_worker_killed_mid_run(stack: ChaosStack, engine: Engine) -> None:
    run_scenario("kill -9 a worker mid-run", stack, engine, kill_worker_mid_run, seconds=0.5)


@pytest.mark.short
def test_the_leader_killed_mid_burst(stack: ChaosStack, engine: Engine) -> None:
    def kill_leader(s: ChaosStack, _engine: Engine) -> None:
        s.processes.signal(s.leader(), signal.SIGKILL)

    run_scenario("kill -9 the leading dispatcher", stack, engine, kill_leader)


# Once more on a fresh stack before it counts as failed: that a recall happens at all
# within its minute depends on the box's load (a fresh-clone CI run on a busy box saw
# none once, after two scenarios before it); the books it then checks do not.
@pytest.mark.flaky(reruns=1)
def test_the_leader_killed_after_recalling_runs_from_the_workers_queues(
    stack: ChaosStack, engine: Engine
) -> None:
    # The handler has been quick when a burst of its slow runs comes due at once: the
    # workers' queues take it at the old price, and once its runs show it grown slow the
    # leader recalls their unstarted ends (fenced, back to SCHEDULED). Killed then, it
    # leaves those runs waiting in MySQL and copies of them in the queues: each must
    # still run exactly once.
    quick = stack.submit_burst(600, over_ms=0, seconds=0, callbacks=False)
    assert not stack.settle(engine, quick, SETTLE_SECONDS).problems
    time.sleep(1.5)  # three heartbeats: the handler's quick time is what the leader reads

    def kill_after_a_recall(s: ChaosStack, _engine: Engine) -> None:
        leader = s.leader()
        wait_until(lambda: "taken back" in s.processes.log(leader), 60, what="a recall")
        s.processes.signal(leader, signal.SIGKILL)

    run_scenario(
        "kill -9 the leader after a recall",
        stack,
        engine,
        kill_after_a_recall,
        seconds=0.5,
        over_ms=0,
    )


def test_the_leader_stopped_past_its_lease(stack: ChaosStack, engine: Engine) -> None:
    def stop_leader(s: ChaosStack, _engine: Engine) -> None:
        leader = s.leader()
        standby = next(d for d in DISPATCHERS if d != leader)
        steps = len(s.lease_events(leader))
        s.processes.signal(leader, signal.SIGSTOP)
        try:
            # The lease (1.5 s) runs out while the leader cannot renew it.
            wait_until(lambda: s.leads(standby), 30, what=f"{standby} to take the lease")
        finally:
            s.processes.signal(leader, signal.SIGCONT)
        wait_until(
            lambda: {"lease lost", "stepping down"} & set(s.lease_events(leader)[steps:]),
            30,
            what=f"{leader} to step down once it runs again",
        )
        assert s.leader() == standby

    run_scenario("SIGSTOP the leader past its lease", stack, engine, stop_leader)


def test_a_worker_stopped_past_the_staleness_limit(stack: ChaosStack, engine: Engine) -> None:
    held: set[str] = set()

    def stop_worker(s: ChaosStack, engine: Engine) -> None:
        s.processes.signal("w1", signal.SIGSTOP)
        try:
            held.update(executions_on(engine, "w1", ("QUEUED",)))
            # Twice past KAIROS_HEARTBEAT_STALE_MS (2.5 s) by the heartbeats' own record.
            wait_until(
                lambda: heartbeat_age_ms(engine, "w1") > 5_000, 30, what="w1's heartbeat to age"
            )
        finally:
            s.processes.signal("w1", signal.SIGCONT)

    # A live worker keeps its runs, however stale its heartbeat: none is judged LOST
    # (and retried unseen), and each run w1 held ends on w1, but for those the leader
    # recalls. The runs w1 was running while stopped report the pause as their time, so
    # its queue may be priced past the recall's factor once it runs again: the leader may
    # then take the unstarted end of it back (fenced, run once) and share it out anew.
    run_scenario(
        "SIGSTOP a worker past staleness",
        stack,
        engine,
        stop_worker,
        seconds=0.3,
        execution_statuses={"SUCCEEDED"},
    )
    assert held, "w1 held no work when it was stopped"
    ended = executions_on(engine, "w1", ("SUCCEEDED",))
    moved = held - ended
    assert len(moved) <= recalled_from(stack, "w1"), (
        f"runs w1 held that ended elsewhere, more than were recalled: {sorted(moved)}"
    )


@pytest.mark.short
def test_the_namespaces_redis_keys_wiped(stack: ChaosStack, engine: Engine) -> None:
    def wipe(s: ChaosStack, _engine: Engine) -> None:
        assert faults.wipe_redis_namespace(s.namespace) > 0

    run_scenario("wipe the namespace's Redis keys", stack, engine, wipe, seconds=0.3)


def test_a_worker_restarted_under_the_same_id(stack: ChaosStack, engine: Engine) -> None:
    def restart(s: ChaosStack, engine: Engine) -> None:
        wait_until(lambda: queued_on(engine, "w1"), 10, what="work on w1")
        s.processes.signal("w1", signal.SIGKILL)
        s.processes.running["w1"].wait()
        start_worker(s.processes, "w1", name="w1-again")

    run_scenario("a worker restarted with the same id", stack, engine, restart, seconds=0.5)


def test_a_worker_drained_with_queued_and_running_work(stack: ChaosStack, engine: Engine) -> None:
    def drain(s: ChaosStack, engine: Engine) -> None:
        wait_until(lambda: queued_on(engine, "w1"), 10, what="work on w1")
        s.processes.signal("w1", signal.SIGTERM)

    run_scenario("a worker drained (SIGTERM)", stack, engine, drain, seconds=0.5)


def test_a_worker_drained_by_an_operator_with_queued_and_running_work(
    stack: ChaosStack, engine: Engine
) -> None:
    def drain(s: ChaosStack, engine: Engine) -> None:
        wait_until(lambda: queued_on(engine, "w1"), 10, what="work on w1")
        done = subprocess.run(
            [KAIROS, "workers", "drain", "w1"], env=s.processes.env, capture_output=True
        )
        assert done.returncode == 0, done.stderr
        began = time.monotonic()
        wait_until(lambda: queued_on(engine, "w1") == 0, MOVE_SECONDS, what="w1's work to move")
        print(f"w1's work moved or finished in {time.monotonic() - began:.1f} s")
        assert s.processes.running["w1"].poll() is None, "a drained worker stays up"

    run_scenario("a worker drained (kairos workers drain)", stack, engine, drain, seconds=0.5)


def test_the_leaders_mysql_connection_blackholed(
    processes: Processes, namespace: StoreSettings, receiver: CallbackReceiver, engine: Engine
) -> None:
    proxy = faults.TcpProxy(3306)
    try:
        url = f"mysql+pymysql://root@127.0.0.1:{proxy.port}"
        stack = ChaosStack.start(processes, namespace, receiver, {"KAIROS_DATABASE_URL": url})

        def blackhole(s: ChaosStack, _engine: Engine) -> None:
            # Healed only once the test is over: the standby must take over from a
            # leader stuck on a connection that neither answers nor closes.
            assert s.leader() == "d1"
            proxy.blackhole()

        run_scenario("the leader's MySQL blackholed (no RST)", stack, engine, blackhole)
        assert stack.leader() == "d2"
    finally:
        proxy.heal()
        proxy.close()


@pytest.mark.serial
def test_rabbitmq_restarted(stack: ChaosStack, engine: Engine) -> None:
    # The notifier's connection drops: a callback posted but not yet acked comes back
    # once (README, "Callbacks are never lost"), and may be posted again.
    run_scenario(
        "restart RabbitMQ",
        stack,
        engine,
        lambda s, e: faults.restart_rabbitmq(3.0),
        seconds=0.3,
        extra_posts=1,
    )


@pytest.mark.serial
def test_mariadb_restarted(stack: ChaosStack, engine: Engine) -> None:
    # A POST made as MySQL went away is never recorded; its callback is posted again.
    run_scenario(
        "restart MariaDB", stack, engine, lambda s, e: faults.restart_mariadb(3.0), extra_posts=1
    )


@pytest.mark.serial
def test_redis_restarted(stack: ChaosStack, engine: Engine) -> None:
    run_scenario("restart Redis (empty)", stack, engine, lambda s, e: faults.restart_redis(2.0))
