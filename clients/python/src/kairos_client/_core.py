"""The clients' transport-agnostic core: each attempt's request, and what its answer means.

``Client`` and ``AsyncClient`` differ only in doing the I/O: each sends the
``httpx.Request`` an ``Exchange`` builds, hands it the answer (or the transport error),
and sleeps for as long as it (or ``Waiting``) says. What an operation sends and how its
answer reads lives in ``operations``; when to send again, in ``RetryPolicy``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypedDict, TypeVar

import httpx

from kairos_client import operations as ops
from kairos_client._version import VERSION
from kairos_client.enums import FINISHED_JOB_STATUSES
from kairos_client.errors import ConnectionFailedError, WaitTimeoutError
from kairos_client.models import Job
from kairos_client.retries import RetryPolicy

T = TypeVar("T")

Page = tuple[list[T], str | None]
PageCall = Callable[[str | None], ops.Call[Page[T]]]

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
DEFAULT_PAGE_SIZE = 100
LOG_PAGE_SIZE = 200
"""Lines per page of a run log: the API serves 1 to 1,000, 200 when not told."""


def client_headers(api_key: str) -> dict[str, str]:
    """The headers of every request: the API key, what answers are read, who asks."""
    if not api_key:
        raise ValueError("api_key is empty: pass the app's API key (`kairos app create`)")
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json, application/problem+json",
        "User-Agent": f"kairos-client-python/{VERSION} httpx/{httpx.__version__}",
    }


def base_url_of(base_url: str) -> str:
    """The API's root URL, without a trailing slash (``http://127.0.0.1:8000``)."""
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
    return base_url.rstrip("/")


def merged_headers(call_headers: Mapping[str, str]) -> dict[str, str] | None:
    """The call's own headers for httpx, or None when it has none."""
    return dict(call_headers) if call_headers else None


def finished(job: Job) -> bool:
    """True once the job is in a status it never leaves (SUCCEEDED, FAILED, CANCELLED)."""
    return job.status in FINISHED_JOB_STATUSES


def next_poll(poll_interval: float, polls: int, remaining: float) -> float:
    """The wait before the next read in ``wait``: the interval, doubled after every
    ten reads up to 8x, never past the deadline."""
    grown = poll_interval * (1 << min(3, polls // 10))
    return max(0.0, min(grown, remaining))


class HttpSettings(TypedDict):
    """What both clients build their ``httpx`` client with, besides its transport."""

    base_url: str
    headers: dict[str, str]
    timeout: float | httpx.Timeout
    follow_redirects: bool


def http_settings(base_url: str, api_key: str, timeout: float | httpx.Timeout) -> HttpSettings:
    """The ``httpx`` client settings for an app's access to the API at ``base_url``."""
    return HttpSettings(
        base_url=base_url_of(base_url),
        headers=client_headers(api_key),
        timeout=timeout,
        follow_redirects=False,
    )


@dataclass(frozen=True)
class Retry:
    """Send the call again after ``delay`` seconds."""

    delay: float


class Exchange(Generic[T]):
    """One call, sent until it is answered for good or no longer worth another try."""

    def __init__(self, call: ops.Call[T], retry: RetryPolicy) -> None:
        self.call = call
        self.retry = retry
        self.attempt = 0

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """The next attempt's request: the call's URL, query, headers and JSON body on
        top of what ``http`` adds to each (base URL, API key, timeout)."""
        self.attempt += 1
        call = self.call
        return http.build_request(
            call.method,
            call.path,
            params=tuple(call.query),
            json=call.body,
            headers=merged_headers(call.headers),
        )

    def after_answer(self, response: httpx.Response) -> T | Retry:
        """The call's result (or its ``ApiError``, raised), or a ``Retry``."""
        delay = self.retry.after_answer(self.attempt, response, self.call.repeatable)
        if delay is not None:
            return Retry(delay)
        return self.call.answer(response, repeated=self.attempt > 1)

    def after_error(self, error: httpx.TransportError) -> Retry:
        """A ``Retry`` after a transport error, or ``ConnectionFailedError`` (raised)."""
        delay = self.retry.after_error(self.attempt, error, self.call.repeatable)
        if delay is None:
            call = self.call
            raise ConnectionFailedError(f"{call.method} {call.path}: {error!r}") from error
        return Retry(delay)


class Waiting:
    """``wait``'s polling of a job: after each read, done, timed out or the next delay."""

    def __init__(self, job_id: int, timeout: float, poll_interval: float) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.deadline = time.monotonic() + timeout
        self.polls = 0

    def after(self, job: Job) -> float | None:
        """None once ``job`` is finished, else the delay before the next read;
        ``WaitTimeoutError`` (raised) once the deadline has passed."""
        remaining = self.deadline - time.monotonic()
        if finished(job):
            return None
        if remaining <= 0:
            raise WaitTimeoutError(self.job_id, self.timeout, job)
        delay = next_poll(self.poll_interval, self.polls, remaining)
        self.polls += 1
        return delay
