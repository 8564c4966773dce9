"""Callbacks survive their processes being killed: the notifier killed mid-delivery and
the results-recording dispatcher killed mid-burst, each started again; every callback
still arrives, a duplicate only under the same webhook-id and with the same body."""

from __future__ import annotations

import json
import signal
from collections import defaultdict

from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import Api, CallbackReceiver, Processes, connect_api, free_port, wait_until

JOBS = 40


def start(processes: Processes) -> Api:
    processes.start("w1", "worker", "--id", "w1")
    processes.start("d1", "dispatcher", "--id", "d1")
    wait_until(lambda: "lease acquired" in processes.log("d1"), 20, what="d1 to lead")
    processes.start("n1", "notifier")
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    return connect_api(processes, port)


def submit(api: Api, url: str) -> list[int]:
    return [
        api.post_job({"jobName": f"cb-{n}", "jobHandler": "demo.noop", "callbackUrl": url}).json()[
            "jobId"
        ]
        for n in range(JOBS)
    ]


def check_arrivals(receiver: CallbackReceiver, job_ids: list[int]) -> int:
    """Every job's callback arrived; a duplicate is the same id and body. Returns the
    number of duplicates."""
    bodies: dict[str, set[str]] = defaultdict(set)
    jobs_of: dict[str, int] = {}
    for arrival in receiver.received:
        bodies[arrival.headers["webhook-id"]].add(arrival.body)
        jobs_of[arrival.headers["webhook-id"]] = json.loads(arrival.body)["data"]["jobId"]
    assert sorted(jobs_of.values()) == sorted(job_ids), "one callback per job, none lost"
    assert all(len(b) == 1 for b in bodies.values()), "a duplicate carries the same body"
    return len(receiver.received) - len(bodies)


def test_the_notifier_killed_mid_delivery_loses_no_callback(
    processes: Processes, engine: Engine
) -> None:
    receiver = CallbackReceiver(delay_seconds=0.2)
    try:
        api = start(processes)
        job_ids = submit(api, receiver.url)
        wait_until(lambda: len(receiver.received) >= 5, 60, what="the first callbacks")
        processes.signal("n1", signal.SIGKILL)
        processes.running["n1"].wait(timeout=10)
        processes.start("n2", "notifier")
        assert_books(engine, Expectation(job_ids), timeout=90)
    finally:
        receiver.close()
    duplicates = check_arrivals(receiver, job_ids)
    print(f"{duplicates} duplicate callbacks after the kill")


def test_the_dispatcher_killed_mid_burst_loses_no_callback(
    processes: Processes, engine: Engine
) -> None:
    receiver = CallbackReceiver()
    try:
        api = start(processes)
        job_ids = submit(api, receiver.url)
        wait_until(lambda: len(receiver.received) >= 3, 60, what="the first callbacks")
        processes.signal("d1", signal.SIGKILL)
        processes.running["d1"].wait(timeout=10)
        processes.start("d2", "dispatcher", "--id", "d2")
        assert_books(engine, Expectation(job_ids), timeout=90)
    finally:
        receiver.close()
    check_arrivals(receiver, job_ids)
