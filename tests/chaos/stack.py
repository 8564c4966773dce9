"""The chaos suite's stack: API, two dispatchers, three workers and a notifier, as real
processes on the test's namespace, and the burst of jobs each scenario runs."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy.engine import Engine

from common.clock import wall_ms
from common.config import StoreSettings
from common.vhost import management_api
from tests.books import Books, Expectation, wait_for_books
from tests.chaos.ledger import Ledger
from tests.e2e.harness import (
    Api,
    CallbackReceiver,
    Processes,
    connect_api,
    free_port,
    wait_until,
)
from tests.witnesses import Witnesses, count_arrivals

REPO = Path(__file__).resolve().parents[2]
DISPATCHERS = ("d1", "d2")
WORKERS = ("w1", "w2", "w3")
HANDLERS = "tests.chaos.ledger"
_LEASE = re.compile(r"(lease acquired|lease lost|stepping down)")
# The management API refreshes queue figures this often (RabbitMQ's
# collect_statistics_interval): a queue is quiet once two readings this far apart say so.
STATISTICS_SECONDS = 5.5
QUIET_SECONDS = 90


@dataclass
class ChaosStack:
    """A running stack and what a scenario needs to drive it."""

    processes: Processes
    namespace: StoreSettings
    ledger_path: Path
    receiver: CallbackReceiver
    api: Api

    @classmethod
    def start(
        cls,
        processes: Processes,
        namespace: StoreSettings,
        receiver: CallbackReceiver,
        leader_env: dict[str, str] | None = None,
    ) -> ChaosStack:
        """Start every process; d1 leads (started first); return once jobs can run."""
        ledger = processes.log_dir / "ledger.txt"
        processes.env["KAIROS_CHAOS_LEDGER"] = str(ledger)
        processes.start("d1", "dispatcher", "--id", "d1", **(leader_env or {}))
        wait_until(lambda: "lease acquired" in processes.log("d1"), 30, what="d1 to lead")
        processes.start("d2", "dispatcher", "--id", "d2")
        for worker in WORKERS:
            start_worker(processes, worker)
        processes.start("notifier", "notifier")
        port = free_port()
        processes.start("api", "api", "--port", str(port))
        api = connect_api(processes, port, probe_handler="chaos.effect")
        wait_until(
            lambda: all("consuming" in processes.log(w) for w in WORKERS),
            30,
            what="every worker to consume",
        )
        time.sleep(1.0)  # the leader's view of the live workers refreshes every 0.5 s
        return cls(processes, namespace, ledger, receiver, api)

    def leader(self) -> str:
        """The dispatcher that holds the lease, by what the dispatchers logged last."""
        for name in DISPATCHERS:
            if self.leads(name):
                return name
        raise AssertionError("no dispatcher leads")

    def leads(self, dispatcher: str) -> bool:
        """True when the last lease event ``dispatcher`` logged is taking the lease."""
        events = self.lease_events(dispatcher)
        return bool(events) and events[-1] == "lease acquired"

    def lease_events(self, dispatcher: str) -> list[str]:
        """Every lease event ``dispatcher`` logged, in order."""
        return list(_LEASE.findall(self.processes.log(dispatcher)))

    def quiesce(self) -> None:
        """Wait until no queue of the namespace holds a message, ready or unacked, then
        stop the workers and the notifier (a run going finishes first): the ledger and
        the receiver's log are whole from then on, late copies included."""
        deadline = time.monotonic() + QUIET_SECONDS
        quiet_since: float | None = None
        while True:
            busy = busy_queues(self.namespace)
            now = time.monotonic()
            quiet_since = (quiet_since or now) if not busy else None
            if quiet_since is not None and now - quiet_since >= STATISTICS_SECONDS:
                break
            if now > deadline:
                raise AssertionError(f"queues still hold messages after {QUIET_SECONDS} s: {busy}")
            time.sleep(0.5)
        stop(self.processes, [n for n in self.processes.running if n[0] == "w"] + ["notifier"])

    def witnesses(self, extra_posts: int = 0) -> Witnesses:
        """The ledger and the receiver's log, to hold the books against (read them once
        the stack is quiet)."""
        arrivals = count_arrivals(r.headers for r in list(self.receiver.received))
        return Witnesses(self.ledger().effects, arrivals, extra_posts)

    def submit_burst(
        self, count: int, over_ms: int, seconds: float = 0.05, callbacks: bool = True
    ) -> list[int]:
        """``count`` one-shot jobs spread over ``over_ms`` from now, a third with a
        callback (none without ``callbacks``); each may be retried, so a run lost to a
        fault runs again."""
        start = wall_ms() + 300
        bodies: list[dict[str, Any]] = []
        for n in range(count):
            body: dict[str, Any] = {
                "jobName": f"chaos-{n}",
                "jobHandler": "chaos.effect",
                "params": {"seconds": seconds},
                "triggerAt": start + n * over_ms // count,
                "maxRetries": 5,
                "retryBackoffSeconds": 1,
                "retryBackoffMaxSeconds": 2,
            }
            if callbacks and n % 3 == 0:
                body["callbackUrl"] = self.receiver.url
            bodies.append(body)
        job_ids: list[int] = []
        for start_at in range(0, count, 500):
            response = httpx.post(
                f"{self.api.base}/openapi/jobs/batch",
                json={"jobs": bodies[start_at : start_at + 500]},
                headers={"Authorization": f"Bearer {self.api.api_key}"},
                timeout=60,
            )
            assert response.status_code == 202, response.text
            job_ids += [int(item["jobId"]) for item in response.json()["jobs"]]
        return job_ids

    def settle(self, engine: Engine, job_ids: list[int], timeout: float) -> Books:
        """Wait for the books to add up (or the time to run out); the last reading."""
        return wait_for_books(engine, Expectation(job_ids), timeout=timeout)

    def ledger(self) -> Ledger:
        """The side effects completed so far."""
        return Ledger.read(self.ledger_path)


def start_worker(processes: Processes, worker: str, name: str | None = None) -> None:
    """Start one worker of the stack under its fixed id (``name``: the process's name in
    ``processes`` and its log, for a worker started again under the same id)."""
    processes.start(
        name or worker,
        "worker",
        *("--id", worker, "--capacity", "4", "--handlers", HANDLERS),
        PYTHONPATH=str(REPO),
    )


WORKER_QUEUE_PREFIX = "kairos.worker."


def busy_queues(namespace: StoreSettings) -> dict[str, int]:
    """The namespace's queues that hold messages (ready or unacked), by the management API.

    A worker queue no consumer reads (its worker killed, or drained and gone) is left
    out: the rescue moved its executions as new messages, and the copies left behind
    reach no handler unless a worker of that id comes back, which it would then drop
    as already ended."""
    base, auth = management_api(namespace)
    vhost = quote(namespace.namespace, safe="")
    response = httpx.get(
        f"{base}/api/queues/{vhost}",
        params={"columns": "name,messages,messages_unacknowledged,consumers"},
        auth=auth,
        timeout=10,
    )
    response.raise_for_status()
    found = {
        str(q["name"]): int(q.get("messages") or 0) + int(q.get("messages_unacknowledged") or 0)
        for q in response.json()
        if not (str(q["name"]).startswith(WORKER_QUEUE_PREFIX) and not q.get("consumers"))
    }
    return {name: n for name, n in found.items() if n}


def stop(processes: Processes, names: list[str]) -> None:
    """SIGTERM the named processes still running and wait for each to exit."""
    for name in names:
        if processes.running[name].poll() is None:
            processes.signal(name, signal.SIGTERM)
    for name in names:
        try:
            processes.running[name].wait(timeout=45)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{name} did not stop within 45 s of SIGTERM") from e
