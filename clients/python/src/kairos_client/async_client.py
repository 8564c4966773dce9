"""``AsyncClient``: the Kairos OpenAPI from asyncio code, with retries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import httpx

from kairos_client import operations as ops
from kairos_client._core import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_TIMEOUT,
    LOG_PAGE_SIZE,
    Exchange,
    PageCall,
    Retry,
    Waiting,
    http_settings,
)
from kairos_client.callbacks import CallbackDelivery
from kairos_client.enums import ExecutionStatus, JobStatus
from kairos_client.models import (
    BackfillAccepted,
    BatchAccepted,
    Execution,
    Job,
    JobAccepted,
    TriggerAccepted,
)
from kairos_client.retries import RetryPolicy
from kairos_client.run_logs import RunLogLine, RunLogPage
from kairos_client.specs import JobChanges, JobSpec, TriggerTime

T = TypeVar("T")


class AsyncClient:
    """``Client``'s twin for asyncio: the same methods, awaited
    (``async with AsyncClient(url, key) as kairos: await kairos.get_job(7)``)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            **http_settings(base_url, api_key, timeout), transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def _send(self, call: ops.Call[T]) -> T:
        exchange = Exchange(call, self.retry)
        while True:
            try:
                response = await self._http.send(exchange.request(self._http))
            except httpx.TransportError as e:
                step: T | Retry = exchange.after_error(e)
            else:
                step = exchange.after_answer(response)
            if not isinstance(step, Retry):
                return step
            await self._sleep(step.delay)

    async def _pages(self, page: PageCall[T]) -> AsyncIterator[T]:
        """Every item of a listing, each page read when the iteration reaches it."""
        cursor: str | None = None
        while True:
            items, cursor = await self._send(page(cursor))
            for item in items:
                yield item
            if cursor is None:
                return

    async def create_job(
        self, spec: JobSpec, *, idempotency_key: str | None = None, traceparent: str | None = None
    ) -> JobAccepted:
        """Submit one job (see ``Client.create_job``)."""
        return await self._send(ops.create_job(spec, idempotency_key, traceparent))

    async def create_jobs(
        self,
        specs: Iterable[JobSpec],
        *,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> BatchAccepted:
        """Submit 1 to 1,000 jobs, all or nothing (see ``Client.create_jobs``)."""
        return await self._send(ops.create_jobs(specs, idempotency_key, traceparent))

    async def get_job(self, job_id: int, *, preview: int = 0) -> Job:
        """One job, with its next ``preview`` trigger times."""
        return await self._send(ops.get_job(job_id, preview))

    async def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        handler: str | None = None,
        name_prefix: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[Job]:
        """Every job of the app that matches, newest first, page by page
        (``async for job in kairos.list_jobs(): ...``)."""
        jobs = self._pages(
            lambda cursor: ops.list_jobs_page(status, handler, name_prefix, page_size, cursor)
        )
        async for job in jobs:
            yield job

    async def list_executions(
        self,
        job_id: int,
        *,
        status: Iterable[ExecutionStatus | str] = (),
        since: TriggerTime | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[Execution]:
        """The job's executions, newest first, page by page (see
        ``Client.list_executions``)."""
        statuses = list(status)
        executions = self._pages(
            lambda cursor: ops.list_executions_page(job_id, statuses, since, page_size, cursor)
        )
        async for execution in executions:
            yield execution

    async def get_execution(self, execution_id: str) -> Execution:
        """One execution of the app's jobs."""
        return await self._send(ops.get_execution(execution_id))

    async def execution_logs(
        self, execution_id: str, *, after: int = 0, limit: int = LOG_PAGE_SIZE
    ) -> RunLogPage:
        """One page of the lines the execution's handler logged, past seq ``after``."""
        return await self._send(ops.get_execution_logs(execution_id, after, limit))

    async def iter_execution_logs(
        self, execution_id: str, *, follow: bool = False, poll_interval: float = 1.0
    ) -> AsyncIterator[RunLogLine]:
        """Every line of the execution's log, oldest first, page by page; with
        ``follow``, new lines as they come until the execution has ended."""
        after = 0
        while True:
            page = await self.execution_logs(execution_id, after=after)
            for line in page.lines:
                yield line
            after = page.next_after
            if page.lines:
                continue
            if not follow or page.ended:
                return
            await self._sleep(poll_interval)

    async def pause(self, job_id: int) -> Job:
        """Stop claiming the job's triggers; the job as paused."""
        return await self._send(ops.job_action(job_id, "pause"))

    async def resume(self, job_id: int) -> Job:
        """Claim the paused job's triggers again; the job as resumed."""
        return await self._send(ops.job_action(job_id, "resume"))

    async def cancel(self, job_id: int) -> Job:
        """End the job: its scheduled runs are cancelled, running ones finish."""
        return await self._send(ops.job_action(job_id, "cancel"))

    async def trigger(
        self,
        job_id: int,
        *,
        idempotency_key: str | None = None,
        params: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> TriggerAccepted:
        """Run the job now, keyed so that a retry runs it once; ``params`` replace the
        job's for this run only; ``traceparent`` (W3C) joins the run to the caller's trace."""
        return await self._send(ops.trigger(job_id, idempotency_key, params, traceparent))

    async def backfill(
        self, job_id: int, from_time: TriggerTime, to_time: TriggerTime
    ) -> BackfillAccepted:
        """Run the cron or fixed-rate job's past trigger times in ``[from_time, to_time)``
        that have no execution yet (``to_time`` after now counts as now); a repeat
        creates nothing more. A datetime without tzinfo is a wall time in the job's zone."""
        return await self._send(ops.backfill(job_id, from_time, to_time))

    async def update(self, job_id: int, changes: JobChanges) -> Job:
        """Change the fields set in ``changes``; the job as changed."""
        return await self._send(ops.update(job_id, changes))

    async def delete(self, job_id: int) -> None:
        """Cancel the job and hide it."""
        await self._send(ops.delete(job_id))

    async def replay_callback(self, delivery_id: str) -> None:
        """Send a DELIVERED or DEAD callback again, on a fresh schedule, with the same
        webhook-id and body; ``ConflictError`` while it is still on its way."""
        await self._send(ops.replay_callback(delivery_id))

    async def callbacks(self, job_id: int) -> list[CallbackDelivery]:
        """The job's callback deliveries: state, every attempt, the next one's time."""
        return [delivery async for delivery in self._pages(partial(ops.callbacks_page, job_id))]

    async def wait(self, job_id: int, timeout: float, *, poll_interval: float = 0.5) -> Job:
        """Read the job until it is SUCCEEDED, FAILED or CANCELLED (see
        ``Client.wait``); ``WaitTimeoutError`` after ``timeout`` seconds."""
        waiting = Waiting(job_id, timeout, poll_interval)
        while True:
            job = await self.get_job(job_id)
            delay = waiting.after(job)
            if delay is None:
                return job
            await self._sleep(delay)
