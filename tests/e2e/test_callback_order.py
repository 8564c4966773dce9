"""Two notifiers share the callbacks queue: every callback reaches an independent receiver
exactly once (by ``webhook-id``), and each job's callbacks arrive in the order of its
runs, though some of them fail their first POST and wait in a retry tier while the
job's next run ends and calls back.

Each of the jobs is run several times in a row (a manual trigger once its previous
run ended, so its runs never overlap). The receiver answers 503 to the first POST of
about half the callbacks: the earlier callback then waits ~3 s in its retry tier while
the later one reaches a notifier fresh, often the other one.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import Counter, defaultdict

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until
from tests.e2e.local_receiver import LocalReceiver

pytestmark = pytest.mark.timeout(360)

JOBS = 16
RUNS = 4
# Long enough that a later run ends and calls back while its earlier callback waits.
RETRY_TIERS = "3,3"


class OrderingReceiver:
    """Takes each callback once it has refused the first POST of about half of them
    (by webhook-id); notes what it took, in the order taken."""

    def __init__(self) -> None:
        self.taken: list[tuple[int, str, str]] = []
        self.posts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = LocalReceiver(self._answer)
        self.url = self._server.url

    def _answer(self, body: bytes, webhook_id: str) -> int | None:
        data = json.loads(body)["data"]
        with self._lock:
            self.posts[webhook_id] += 1
            if self.posts[webhook_id] == 1 and int(webhook_id[-1], 16) % 2 == 0:
                return 503
            self.taken.append((int(data["jobId"]), data["triggerTime"], webhook_id))
        return None

    def taken_ids(self) -> Counter[str]:
        """How many times each callback was taken."""
        with self._lock:
            return Counter(webhook_id for _, _, webhook_id in self.taken)

    def trigger_times_by_job(self) -> dict[int, list[str]]:
        """Each job's callbacks as taken: their runs' trigger times."""
        found: dict[int, list[str]] = defaultdict(list)
        with self._lock:
            for job_id, trigger_time, _ in self.taken:
                found[job_id].append(trigger_time)
        return dict(found)

    def close(self) -> None:
        """Stop serving."""
        self._server.close()


def start_stack(processes: Processes) -> Api:
    """api, dispatcher, two workers and two notifiers."""
    port = free_port()
    processes.start("api", "api", "--port", str(port), KAIROS_RATE_LIMIT_PER_SECOND="0")
    processes.start("dispatcher", "dispatcher", KAIROS_LEASE_TTL_MS="10000")
    for worker in ("w1", "w2"):
        processes.start(worker, "worker", "--id", worker, "--capacity", "8")
    for notifier in ("n1", "n2"):
        processes.start(notifier, "notifier", KAIROS_RETRY_TIERS_SECONDS=RETRY_TIERS)
    return connect_api(processes, port)


def runs_ended(engine: Engine, count: int) -> bool:
    """Whether ``count`` runs exist and all of them ended."""
    with engine.connect() as conn:
        total, going = conn.execute(
            sa.text(
                "SELECT COUNT(*), COALESCE(SUM(status IN ('SCHEDULED', 'QUEUED')), 0) "
                "FROM executions"
            )
        ).one()
    return int(total) >= count and int(going) == 0


def test_two_notifiers_deliver_each_callback_once_and_each_jobs_in_run_order(
    processes: Processes, engine: Engine
) -> None:
    receiver = OrderingReceiver()
    try:
        api = start_stack(processes)
        body = {"jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}
        job_ids = []
        for n in range(JOBS):
            created = api.post_job({**body, "jobName": f"order-{n}", "callbackUrl": receiver.url})
            assert created.status_code == 202, created.text
            job_ids.append(int(created.json()["jobId"]))
        for run in range(1, RUNS + 1):
            for job_id in job_ids:
                assert api.act(job_id, "trigger").status_code == 202
            # The next run only once this one ended: a job's runs never overlap.
            wait_until(functools.partial(runs_ended, engine, run * JOBS), 60, what=f"runs {run}")
        books = assert_books(engine, Expectation(job_ids, job_statuses={"WAITING"}), timeout=120)
        assert books.deliveries == JOBS * RUNS
    finally:
        receiver.close()
    taken = receiver.taken_ids()
    assert len(taken) == JOBS * RUNS and set(taken.values()) == {1}, "a callback went twice"
    assert sum(receiver.posts.values()) > JOBS * RUNS, "no callback waited in a retry tier"
    by_job = receiver.trigger_times_by_job()
    out_of_order = {job: times for job, times in by_job.items() if times != sorted(times)}
    assert out_of_order == {}, "a job's later callback overtook an earlier one"
    # Each notifier logs its attempts as counts every 10 s (a failure on a line of its own).
    wait_until(
        lambda: all("callback attempt" in processes.log(n) for n in ("n1", "n2")),
        30,
        what="both notifiers' attempts (one notifier did all the work?)",
    )
