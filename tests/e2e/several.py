"""Several of each process on one namespace, as docs/production.md deploys them: two
APIs, two dispatchers, four workers and two notifiers, with a receiver that counts
every POST by ``webhook-id``, an independent ledger of side effects, and what the
processes said about store conflicts and restarts.

Shared by ``tests/e2e/test_several_of_each.py`` and ``bench/several_of_each.py``.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.chaos.ledger import Ledger
from tests.e2e.harness import Api, Processes, connect_api, free_port, wait_until
from tests.e2e.local_receiver import LocalReceiver

REPO = Path(__file__).resolve().parents[2]
HANDLER = "chaos.effect"
STARTUP_S = 300
# A line a process writes when MySQL refused a transaction for its locks: run again in
# place ("store conflict in"), or an error that names the conflict.
_CONFLICT = re.compile(r"store conflict in|\((?:1213|1205), |Deadlock found|Lock wait timeout")
# Lines that say a consumer or a run was started again as if a store were down.
_RESTART = re.compile(r"lost a store|failed; trying again|sending it back|store unavailable")
_CONFLICTS_METRIC = re.compile(r"^kairos_store_conflicts_total\{[^}]*\} (\S+)$", re.M)


class CountingReceiver:
    """Answers 204 at once and counts every POST by its ``webhook-id``."""

    def __init__(self) -> None:
        self.posts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = LocalReceiver(self._count)
        self.url = self._server.url

    def _count(self, _body: bytes, delivery_id: str) -> None:
        with self._lock:
            self.posts[delivery_id] += 1

    def twice(self) -> dict[str, int]:
        """The webhook ids POSTed more than once."""
        return {key: n for key, n in self.posts.items() if n > 1}

    def close(self) -> None:
        """Stop serving."""
        self._server.close()


@dataclass(frozen=True)
class Shape:
    """How many of each process: the deployment docs/production.md describes."""

    apis: int = 2
    dispatchers: int = 2
    workers: int = 4
    notifiers: int = 2

    def names(self, prefix: str, count: int) -> list[str]:
        """``count`` process names: ``prefix`` and a number from 1."""
        return [f"{prefix}{n}" for n in range(1, count + 1)]


@dataclass
class Stack:
    """The running processes, the APIs' base URLs and each process's metrics port."""

    processes: Processes
    apis: list[Api]
    ledger_path: Path
    metrics_ports: dict[str, int] = field(default_factory=dict)

    def ledger(self) -> Ledger:
        """The side effects the workers completed so far."""
        return Ledger.read(self.ledger_path)

    def conflicts_counted(self) -> float:
        """``kairos_store_conflicts_total`` summed over every process that serves it."""
        total = 0.0
        for port in self.metrics_ports.values():
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except httpx.HTTPError:
                continue
            total += sum(float(v) for v in _CONFLICTS_METRIC.findall(text))
        return total

    def log_lines(self, pattern: re.Pattern[str]) -> dict[str, int]:
        """How many lines of each process's log match ``pattern``."""
        found = {}
        for name in self.processes.running:
            lines = self.processes.log(name).splitlines()
            # Log lines begin with their time; a traceback's lines repeat the error.
            found[name] = sum(1 for line in lines if line[:1].isdigit() and pattern.search(line))
        return {name: n for name, n in found.items() if n}

    def log_lines_with(self, text: str) -> dict[str, int]:
        """How many log lines of each process hold ``text``."""
        return self.log_lines(re.compile(re.escape(text)))

    def conflict_lines(self) -> dict[str, int]:
        """Log lines naming a deadlock or a lock wait timeout, by process."""
        return self.log_lines(_CONFLICT)

    def restart_lines(self) -> dict[str, int]:
        """Log lines of a consumer or run started again as after an outage, by process."""
        return self.log_lines(_RESTART)


def start_stack(processes: Processes, shape: Shape, worker_capacity: int = 8) -> Stack:
    """Start every process of ``shape``; return once every API accepts jobs."""
    ledger = processes.log_dir / "ledger.txt"
    processes.env["KAIROS_CHAOS_LEDGER"] = str(ledger)
    ports: dict[str, int] = {}

    def start(name: str, *args: str, **env: str) -> None:
        ports[name] = free_port()
        processes.start(name, *args, KAIROS_METRICS_PORT=str(ports[name]), **env)

    api_ports = [free_port() for _ in range(shape.apis)]
    for name, port in zip(shape.names("api", shape.apis), api_ports, strict=True):
        # An API serves /metrics on a metrics port of its own, as every service does.
        ports[name] = free_port()
        processes.start(name, "api", "--port", str(port), KAIROS_METRICS_PORT=str(ports[name]))
    for name in shape.names("d", shape.dispatchers):
        start(name, "dispatcher", "--id", name)
    workers = shape.names("w", shape.workers)
    for name in workers:
        handlers = ("--handlers", "tests.chaos.ledger")
        capacity = ("--capacity", str(worker_capacity))
        start(name, "worker", "--id", name, *capacity, *handlers, PYTHONPATH=str(REPO))
    for name in shape.names("n", shape.notifiers):
        start(name, "notifier")
    # A dozen processes starting at once on a small machine: give them their time.
    bases = [
        wait_until(functools.partial(_healthy, p), STARTUP_S, what="an API") for p in api_ports
    ]
    first = connect_api(processes, api_ports[0], probe_handler=HANDLER)
    apis = [first] + [Api(base, first.api_key, first.signing_secret) for base in bases[1:]]
    wait_until(
        lambda: all("consuming" in processes.log(w) for w in workers),
        STARTUP_S,
        what="every worker to consume",
    )
    return Stack(processes, apis, ledger, ports)


def _healthy(port: int) -> str | None:
    base = f"http://127.0.0.1:{port}"
    try:
        return base if httpx.get(f"{base}/healthz", timeout=2).status_code == 200 else None
    except httpx.HTTPError:
        return None


def job_bodies(count: int, callback_url: str) -> list[dict[str, Any]]:
    """``count`` one-shot ledger jobs due now; every third calls back."""
    bodies: list[dict[str, Any]] = []
    for n in range(count):
        body: dict[str, Any] = {"jobName": f"several-{n}", "jobHandler": HANDLER}
        body["params"] = {"seconds": 0}
        if n % 3 == 0:
            body["callbackUrl"] = callback_url
        bodies.append(body)
    return bodies


def submit(apis: list[Api], bodies: list[dict[str, Any]], clients: int) -> list[int]:
    """POST every body, one request each, from ``clients`` threads spread over the APIs."""

    def post_share(n: int) -> list[int]:
        api = apis[n % len(apis)]
        headers = {"Authorization": f"Bearer {api.api_key}"}
        ids = []
        with httpx.Client(base_url=api.base, headers=headers, timeout=60) as http:
            for body in bodies[n::clients]:
                response = http.post("/openapi/jobs", json=body)
                assert response.status_code == 202, response.text
                ids.append(int(response.json()["jobId"]))
        return ids

    with ThreadPoolExecutor(clients) as pool:
        return [job_id for ids in pool.map(post_share, range(clients)) for job_id in ids]
