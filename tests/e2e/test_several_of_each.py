"""Several of each process on one namespace, as docs/production.md deploys them, at
volume and with no fault at all: every job's side effect happens once (by a ledger the
workers' handler writes, apart from Kairos's own books), every callback reaches its
receiver exactly once by ``webhook-id``, the lock conflicts the processes meet are
counted, and none of them restarts a consumer or sends a message back.
"""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import make_engine
from tests.books import Expectation, assert_books
from tests.e2e.harness import Processes, wait_until
from tests.e2e.several import CountingReceiver, Shape, job_bodies, start_stack, submit

JOBS = 2000
CLIENTS = 8
CONFLICT_RETRIED = "store conflict in"


def books_engine(namespace: StoreSettings) -> Engine:
    """An engine whose session MariaDB does not end while the books of thousands of jobs
    are checked inside one read (the server's idle-transaction limit would)."""
    patient = namespace.model_copy(update={"database_idle_transaction_seconds": 0})
    return make_engine(patient, pool_size=2)


def exports_the_conflicts_metric(port: int) -> bool:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return "# TYPE kairos_store_conflicts_total counter" in text


# Twelve processes start and 2,000 jobs go through them: about two minutes on a quiet
# 2-core box, longer while other test runs share it.
@pytest.mark.timeout(480)
def test_two_apis_two_dispatchers_four_workers_two_notifiers_do_everything_once(
    processes: Processes, namespace: StoreSettings
) -> None:
    receiver = CountingReceiver()
    engine = books_engine(namespace)
    try:
        stack = start_stack(processes, Shape(apis=2, dispatchers=2, workers=4, notifiers=2))
        job_ids = submit(stack.apis, job_bodies(JOBS, receiver.url), CLIENTS)
        books = assert_books(engine, Expectation(job_ids), timeout=240)
        callbacks = len(range(0, JOBS, 3))
        assert (books.executions, books.deliveries) == (JOBS, callbacks)
        ledger = wait_until(
            lambda: (found := stack.ledger()) and len(found.by_trigger) >= JOBS and found,
            30,
            what="every side effect in the ledger",
        )
        assert ledger.duplicated() == {}, "a side effect happened twice"
        assert len(ledger.execution_ids) == JOBS
        assert receiver.twice() == {}, "a callback was POSTed twice"
        assert len(receiver.posts) == callbacks
        # Every conflict met is counted; each one run again also says so in a log line.
        assert all(exports_the_conflicts_metric(p) for p in stack.metrics_ports.values())
        retried = sum(stack.log_lines_with(CONFLICT_RETRIED).values())
        assert stack.conflicts_counted() >= retried
        assert stack.restart_lines() == {}, "a consumer restarted or a message went back"
        print(f"{JOBS} jobs: {stack.conflicts_counted():.0f} conflicts, all run again in place")
    finally:
        receiver.close()
        engine.dispose()
