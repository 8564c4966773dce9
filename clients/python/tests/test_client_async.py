"""``AsyncClient`` sends what ``Client`` sends and retries alike."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import pytest

from kairos_client import (
    AsyncClient,
    ConnectionFailedError,
    JobChanges,
    JobSpec,
    JobStatus,
    NotFoundError,
    WaitTimeoutError,
)
from scripted import Scripted, execution_json, job_json, ok, problem

T = TypeVar("T")


def run(api: Scripted, use: Callable[[AsyncClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with api.async_client() as kairos:
            return await use(kairos)

    return asyncio.run(main())


def test_create_and_trigger_are_keyed_and_retried_under_one_key() -> None:
    api = Scripted(
        [
            httpx.ReadTimeout("slow"),
            ok({"jobId": 7, "status": "WAITING"}, 202),
            ok({"jobId": 7, "executionId": "e-1", "status": "SCHEDULED"}, 202),
        ]
    )

    async def use(kairos: AsyncClient) -> str:
        job_id = (await kairos.create_job(JobSpec("a", "demo.echo"))).job_id
        return (await kairos.trigger(job_id, idempotency_key="t-1")).execution_id

    assert run(api, use) == "e-1"
    keys = [r.headers["idempotency-key"] for r in api.requests]
    assert keys[0] == keys[1] and keys[2] == '"t-1"'


def test_listings_iterate_over_every_page() -> None:
    api = Scripted(
        [
            ok({"jobs": [job_json(2)], "nextCursor": "c"}),
            ok({"jobs": [job_json(1)], "nextCursor": None}),
            ok({"jobId": 2, "executions": [execution_json()], "nextCursor": None}),
        ]
    )

    async def use(kairos: AsyncClient) -> tuple[list[int], int]:
        ids = [job.job_id async for job in kairos.list_jobs(page_size=1)]
        runs = [e async for e in kairos.list_executions(2, status=["SUCCEEDED"])]
        return ids, len(runs)

    assert run(api, use) == ([2, 1], 1)
    assert api.requests[1].url.params["cursor"] == "c"


def test_every_other_method_reaches_its_route() -> None:
    job = ok(job_json())
    api = Scripted(
        [
            ok({"jobs": [{"jobId": 1, "status": "WAITING"}]}, 202),
            job,
            ok(execution_json()),
            job,
            job,
            job,
            job,
            ok(None, 204),
        ]
    )

    async def use(kairos: AsyncClient) -> None:
        await kairos.create_jobs([JobSpec("a", "demo.echo")])
        await kairos.get_job(7)
        await kairos.get_execution("e-1")
        await kairos.pause(7)
        await kairos.resume(7)
        await kairos.cancel(7)
        await kairos.update(7, JobChanges(max_retries=1))
        await kairos.delete(7)

    run(api, use)
    routes = [(r.method, r.url.path) for r in api.requests]
    assert routes == [
        ("POST", "/openapi/jobs/batch"),
        ("GET", "/openapi/jobs/7"),
        ("GET", "/openapi/executions/e-1"),
        ("POST", "/openapi/jobs/7/pause"),
        ("POST", "/openapi/jobs/7/resume"),
        ("POST", "/openapi/jobs/7/cancel"),
        ("PATCH", "/openapi/jobs/7"),
        ("DELETE", "/openapi/jobs/7"),
    ]


def test_retries_wait_with_the_async_sleep_and_errors_carry_problems() -> None:
    busy = problem(503, "store-unavailable")
    busy.headers["retry-after"] = "1"
    api = Scripted([busy, problem(404, "job-not-found", jobId=7)])

    async def use(kairos: AsyncClient) -> None:
        await kairos.get_job(7)

    with pytest.raises(NotFoundError) as caught:
        run(api, use)
    assert caught.value.problem.job_id == 7 and 1 <= api.slept[0] <= 1.1


def test_an_unkeyed_action_is_not_resent_after_a_lost_answer() -> None:
    api = Scripted([httpx.ReadTimeout("slow"), ok(job_json())])

    async def use(kairos: AsyncClient) -> None:
        await kairos.pause(7)

    with pytest.raises(ConnectionFailedError):
        run(api, use)
    assert len(api.requests) == 1


def test_wait_and_its_timeout() -> None:
    api = Scripted([ok(job_json(status="RUNNING")), ok(job_json(status="SUCCEEDED"))])

    async def use(kairos: AsyncClient) -> JobStatus | str:
        return (await kairos.wait(7, timeout=60, poll_interval=0.1)).status

    assert run(api, use) is JobStatus.SUCCEEDED and api.slept == [0.1]
    stuck = Scripted([ok(job_json(status="RUNNING"))])

    async def gives_up(kairos: AsyncClient) -> None:
        await kairos.wait(7, timeout=0)

    with pytest.raises(WaitTimeoutError):
        run(stuck, gives_up)


def test_backfill_is_sent_again_when_its_answer_was_lost() -> None:
    """A repeat creates nothing more, so a lost answer is retried."""
    answer = {
        "jobId": 7,
        "from": "2026-11-01T00:00:00.000Z",
        "to": "2026-11-02T00:00:00.000Z",
        "created": 0,
        "existing": 24,
        "leftToSchedule": 0,
    }
    api = Scripted([httpx.ReadTimeout("slow"), ok(answer, 202)])

    async def use(kairos: AsyncClient) -> int:
        return (await kairos.backfill(7, 1_793_491_200_000, 1_793_577_600_000)).existing

    assert run(api, use) == 24
    assert [r.url.path for r in api.requests] == ["/openapi/jobs/7/backfill"] * 2
    assert api.body(1) == {"from": 1_793_491_200_000, "to": 1_793_577_600_000}
