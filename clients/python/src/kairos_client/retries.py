"""When a request is sent again, and after how long.

A request is sent again when the server certainly did not act on it (the connection
was never made; 429; 503; a 409 that says "try again"), and, for requests that are
safe to repeat (reads, PATCH, DELETE, and creates and triggers, which carry an
``Idempotency-Key``), also when the answer was lost on the way (a read timeout, a
dropped connection, a proxy's 502 or 504). ``Retry-After`` is waited out; otherwise
the wait doubles from ``backoff_seconds`` up to ``backoff_max_seconds``, jittered.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

# The request never reached the server: sending it again cannot do anything twice.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# The request may have reached the server: only a request safe to repeat goes again.
MAYBE_SENT = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.NetworkError, httpx.RemoteProtocolError)

REFUSED_STATUSES = frozenset({429, 503})
LOST_ANSWER_STATUSES = frozenset({502, 504})
TRY_AGAIN_PROBLEMS = frozenset(
    {"urn:kairos:problem:idempotency-key-in-use", "urn:kairos:problem:trigger-busy"}
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a request is sent again.

    ``max_retries`` counts the sends after the first (0: never again). A
    ``Retry-After`` longer than ``retry_after_max_seconds`` is not waited for: the
    error is raised at once, carrying ``retry_after``.
    """

    max_retries: int = 3
    backoff_seconds: float = 0.5
    backoff_max_seconds: float = 8.0
    retry_after_max_seconds: float = 60.0

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1, 2, ...): between half and all of
        ``min(max, base * 2^(retry-1))``, so that many clients do not come back at once."""
        ceiling = min(self.backoff_max_seconds, self.backoff_seconds * 2 ** (retry - 1))
        return random.uniform(ceiling / 2, ceiling)

    def after_error(
        self, retry: int, error: httpx.TransportError, repeatable: bool
    ) -> float | None:
        """The wait before sending again after ``error``, or None to give up."""
        if retry > self.max_retries:
            return None
        if isinstance(error, NOT_SENT) or (repeatable and isinstance(error, MAYBE_SENT)):
            return self.backoff(retry)
        return None

    def after_answer(self, retry: int, response: httpx.Response, repeatable: bool) -> float | None:
        """The wait before sending again after an answer, or None to keep it."""
        if retry > self.max_retries or not _worth_another_try(response, repeatable):
            return None
        wait = retry_after(response)
        if wait is None:
            return self.backoff(retry)
        if wait > self.retry_after_max_seconds:
            return None
        # At least what the server asked; a little more, so that clients spread out.
        return wait + random.uniform(0, min(1.0, wait / 10))


def _worth_another_try(response: httpx.Response, repeatable: bool) -> bool:
    status = response.status_code
    if status in REFUSED_STATUSES:
        return True
    if status in LOST_ANSWER_STATUSES:
        return repeatable
    return status == 409 and problem_type(response) in TRY_AGAIN_PROBLEMS


def problem_type(response: httpx.Response) -> str | None:
    """The ``type`` of a problem answer, or None when the body is not one."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    kind = body.get("type") if isinstance(body, dict) else None
    return kind if isinstance(kind, str) else None


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (delay-seconds or an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
