"""Chaos: a burst of jobs, a fault in the middle of it, and then the books.

Each scenario starts the whole stack (API, two dispatchers, three workers, notifier),
submits a burst of one-shot jobs (a third with callbacks; each may be retried), injects
its fault while the burst runs, lets the system settle, and asserts: every job
SUCCEEDED, every execution final, every callback delivered, no trigger whose side
effect completed twice (the ledger), and no side effect of an execution that was
never scheduled. The table printed at the end shows each scenario's figures.

``short`` scenarios run in ``make test``; ``make chaos`` runs them all. ``serial`` ones
restart the machine's servers: they never run beside other tests.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from tests.chaos import faults
from tests.chaos.conftest import OUTCOMES, Outcome
from tests.chaos.stack import ChaosStack, start_worker
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
) -> None:
    """Burst, fault after two seconds of it, settle, check the books and the ledger."""
    job_ids = stack.submit_burst(count, over_ms=6_000, seconds=seconds)
    time.sleep(2.0)
    began = time.monotonic()
    fault(stack, engine)
    books = stack.settle(engine, job_ids, SETTLE_SECONDS)
    recovered = time.monotonic() - began
    ledger = stack.ledger()
    duplicated = ledger.duplicated()
    succeeded = sum(1 for status in books.jobs.values() if status == "SUCCEEDED")
    OUTCOMES.append(
        Outcome(name, len(job_ids), succeeded, len(job_ids) - succeeded, len(duplicated), recovered)
    )
    assert not duplicated, f"side effects completed twice: {duplicated}"
    assert not books.problems, books.summary()
    assert ledger.execution_ids <= scheduled_ids(engine), "a side effect of no execution"


def scheduled_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return {str(r[0]) for r in conn.execute(sa.text("SELECT execution_id FROM executions"))}


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


def test_the_leader_stopped_past_its_lease(stack: ChaosStack, engine: Engine) -> None:
    def stop_leader(s: ChaosStack, _engine: Engine) -> None:
        leader = s.leader()
        s.processes.signal(leader, signal.SIGSTOP)
        time.sleep(5.0)  # three lease lifetimes: the standby takes over meanwhile
        s.processes.signal(leader, signal.SIGCONT)

    run_scenario("SIGSTOP the leader past its lease", stack, engine, stop_leader)


def test_a_worker_stopped_past_the_staleness_limit(stack: ChaosStack, engine: Engine) -> None:
    def stop_worker(s: ChaosStack, _engine: Engine) -> None:
        s.processes.signal("w1", signal.SIGSTOP)
        time.sleep(6.0)  # past KAIROS_HEARTBEAT_STALE_MS (2.5 s) twice over
        s.processes.signal("w1", signal.SIGCONT)

    run_scenario("SIGSTOP a worker past staleness", stack, engine, stop_worker, seconds=0.3)


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
    run_scenario(
        "restart RabbitMQ", stack, engine, lambda s, e: faults.restart_rabbitmq(3.0), seconds=0.3
    )


@pytest.mark.serial
def test_mariadb_restarted(stack: ChaosStack, engine: Engine) -> None:
    run_scenario("restart MariaDB", stack, engine, lambda s, e: faults.restart_mariadb(3.0))


@pytest.mark.serial
def test_redis_restarted(stack: ChaosStack, engine: Engine) -> None:
    run_scenario("restart Redis (empty)", stack, engine, lambda s, e: faults.restart_redis(2.0))
