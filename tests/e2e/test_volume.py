"""Ordinary use at volume: many concurrent clients, callbacks on, and the books checked.

Every job must end SUCCEEDED, every execution final and every callback delivered, with
receivers that answer at once and receivers that take their time.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import Api, CallbackReceiver, Processes, connect_api, free_port

CLIENTS = 16


def submit_concurrently(api: Api, bodies: list[dict[str, Any]]) -> list[int]:
    """POST every body from ``CLIENTS`` threads, each with its own connection."""

    def post_share(share: list[dict[str, Any]]) -> list[int]:
        headers = {"Authorization": f"Bearer {api.api_key}"}
        with httpx.Client(base_url=api.base, headers=headers, timeout=30) as http:
            ids = []
            for body in share:
                response = http.post("/openapi/jobs", json=body)
                assert response.status_code == 202, response.text
                ids.append(int(response.json()["jobId"]))
            return ids

    shares = [bodies[n::CLIENTS] for n in range(CLIENTS)]
    with ThreadPoolExecutor(CLIENTS) as pool:
        return [job_id for ids in pool.map(post_share, shares) for job_id in ids]


def echo_jobs(count: int, receivers: list[CallbackReceiver]) -> list[dict[str, Any]]:
    """``count`` demo.echo bodies; every third calls back, in turn to each receiver."""
    bodies: list[dict[str, Any]] = []
    for n in range(count):
        body: dict[str, Any] = {"jobName": f"v{n}", "jobHandler": "demo.echo", "params": {"n": n}}
        if n % 3 == 0:
            body["callbackUrl"] = receivers[(n // 3) % len(receivers)].url
        bodies.append(body)
    return bodies


def test_jobs_from_concurrent_clients_with_callbacks_are_all_recorded_and_called_back(
    processes: Processes, engine: Engine
) -> None:
    fast = CallbackReceiver()
    slow = CallbackReceiver(delay_seconds=0.2)
    try:
        port = free_port()
        # 3,000 creates as fast as 16 clients go: a volume test, not one of the rate limit.
        no_limit = {"KAIROS_RATE_LIMIT_PER_SECOND": "0"}
        processes.start("up", "up", "--port", str(port), "--workers", "2", **no_limit)
        api = connect_api(processes, port)
        bodies = echo_jobs(3000, [fast, slow])
        began = time.monotonic()
        job_ids = submit_concurrently(api, bodies)
        expected = Expectation(job_ids, execution_statuses={"SUCCEEDED"})
        books = assert_books(engine, expected, timeout=90)
        assert (books.executions, books.deliveries) == (3000, 1000)
        received = fast.received + slow.received
        assert len({r.headers["webhook-id"] for r in received}) == 1000
        print(f"3000 jobs, 1000 callbacks settled in {time.monotonic() - began:.1f} s")
    finally:
        fast.close()
        slow.close()
