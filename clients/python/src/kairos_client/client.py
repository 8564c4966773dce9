"""``Client``: the Kairos OpenAPI from synchronous code, with retries."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
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


class Client:
    """A Kairos app's access to the API: ``Client("http://127.0.0.1:8000", api_key)``.

    Thread-safe; use it as a context manager, or ``close()`` it, to release its
    connections. ``transport`` replaces the network (``httpx.MockTransport`` in tests);
    ``sleep`` replaces ``time.sleep`` between retries and polls.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.Client(**http_settings(base_url, api_key, timeout), transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def _send(self, call: ops.Call[T]) -> T:
        exchange = Exchange(call, self.retry)
        while True:
            try:
                response = self._http.send(exchange.request(self._http))
            except httpx.TransportError as e:
                step: T | Retry = exchange.after_error(e)
            else:
                step = exchange.after_answer(response)
            if not isinstance(step, Retry):
                return step
            self._sleep(step.delay)

    def _pages(self, page: PageCall[T]) -> Iterator[T]:
        """Every item of a listing, each page read when the iteration reaches it."""
        cursor: str | None = None
        while True:
            items, cursor = self._send(page(cursor))
            yield from items
            if cursor is None:
                return

    def create_job(
        self, spec: JobSpec, *, idempotency_key: str | None = None, traceparent: str | None = None
    ) -> JobAccepted:
        """Submit one job. Retried safely: unless the spec has a ``client_request_id``
        or a key is given, a random ``Idempotency-Key`` is sent (and becomes the job's
        ``client_request_id``)."""
        return self._send(ops.create_job(spec, idempotency_key, traceparent))

    def create_jobs(
        self,
        specs: Iterable[JobSpec],
        *,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> BatchAccepted:
        """Submit 1 to 1,000 jobs, all or nothing, keyed as a whole (a random key
        unless given)."""
        return self._send(ops.create_jobs(specs, idempotency_key, traceparent))

    def get_job(self, job_id: int, *, preview: int = 0) -> Job:
        """One job, with its next ``preview`` trigger times (0 to 100)."""
        return self._send(ops.get_job(job_id, preview))

    def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        handler: str | None = None,
        name_prefix: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Iterator[Job]:
        """Every job of the app that matches, newest first, read page by page (each
        page of ``page_size``, 1 to 200, is fetched when the iteration reaches it)."""
        yield from self._pages(
            lambda cursor: ops.list_jobs_page(status, handler, name_prefix, page_size, cursor)
        )

    def list_executions(
        self,
        job_id: int,
        *,
        status: Iterable[ExecutionStatus | str] = (),
        since: TriggerTime | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Iterator[Execution]:
        """The job's executions, newest first, page by page; ``status`` keeps those in
        any of the statuses given, ``since`` those triggered at or after it."""
        statuses = list(status)
        yield from self._pages(
            lambda cursor: ops.list_executions_page(job_id, statuses, since, page_size, cursor)
        )

    def get_execution(self, execution_id: str) -> Execution:
        """One execution of the app's jobs."""
        return self._send(ops.get_execution(execution_id))

    def execution_logs(
        self, execution_id: str, *, after: int = 0, limit: int = LOG_PAGE_SIZE
    ) -> RunLogPage:
        """One page (``limit``, 1 to 1,000 lines) of the lines the execution's handler
        logged, past seq ``after``; ``next_after`` is where the next page starts."""
        return self._send(ops.get_execution_logs(execution_id, after, limit))

    def iter_execution_logs(
        self, execution_id: str, *, follow: bool = False, poll_interval: float = 1.0
    ) -> Iterator[RunLogLine]:
        """Every line of the execution's log, oldest first, page by page; with
        ``follow``, new lines as the running handler logs them (polled every
        ``poll_interval`` s) until the execution has ended."""
        after = 0
        while True:
            page = self.execution_logs(execution_id, after=after)
            yield from page.lines
            after = page.next_after
            if page.lines:
                continue
            if not follow or page.ended:
                return
            self._sleep(poll_interval)

    def pause(self, job_id: int) -> Job:
        """Stop claiming the job's triggers; the job as paused."""
        return self._send(ops.job_action(job_id, "pause"))

    def resume(self, job_id: int) -> Job:
        """Claim the paused job's triggers again; the job as resumed."""
        return self._send(ops.job_action(job_id, "resume"))

    def cancel(self, job_id: int) -> Job:
        """End the job: its scheduled runs are cancelled, running ones finish."""
        return self._send(ops.job_action(job_id, "cancel"))

    def trigger(
        self,
        job_id: int,
        *,
        idempotency_key: str | None = None,
        params: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> TriggerAccepted:
        """Run the job now, besides its schedule; ``params`` replace the job's for this
        run only (the job keeps its own); ``traceparent`` (W3C) joins the run to the
        caller's trace. Keyed (a random key unless given), so a retry after a lost
        answer runs it once."""
        return self._send(ops.trigger(job_id, idempotency_key, params, traceparent))

    def backfill(
        self, job_id: int, from_time: TriggerTime, to_time: TriggerTime
    ) -> BackfillAccepted:
        """Run the cron or fixed-rate job's past trigger times in ``[from_time, to_time)``
        that have no execution yet (``to_time`` after now counts as now); a repeat
        creates nothing more. A datetime without tzinfo is a wall time in the job's zone."""
        return self._send(ops.backfill(job_id, from_time, to_time))

    def update(self, job_id: int, changes: JobChanges) -> Job:
        """Change the fields set in ``changes``; the job as changed."""
        return self._send(ops.update(job_id, changes))

    def delete(self, job_id: int) -> None:
        """Cancel the job and hide it."""
        self._send(ops.delete(job_id))

    def replay_callback(self, delivery_id: str) -> None:
        """Send a DELIVERED or DEAD callback again, on a fresh schedule, with the same
        webhook-id and body; ``ConflictError`` while it is still on its way."""
        self._send(ops.replay_callback(delivery_id))

    def callbacks(self, job_id: int) -> list[CallbackDelivery]:
        """The job's callback deliveries: state, every attempt, the next one's time."""
        return list(self._pages(partial(ops.callbacks_page, job_id)))

    def wait(self, job_id: int, timeout: float, *, poll_interval: float = 0.5) -> Job:
        """Read the job until it is SUCCEEDED, FAILED or CANCELLED and return it; raise
        ``WaitTimeoutError`` after ``timeout`` seconds. A recurring job finishes only
        when cancelled or at its last trigger: poll ``get_execution`` for one run."""
        waiting = Waiting(job_id, timeout, poll_interval)
        while True:
            job = self.get_job(job_id)
            delay = waiting.after(job)
            if delay is None:
                return job
            self._sleep(delay)
