"""A scripted API for the client's tests: answers (or errors) in order, requests kept."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from kairos_client import AsyncClient, Client, RetryPolicy

BASE = "http://kairos.test"
KEY = "key-1"
NO_WAIT = RetryPolicy(backoff_seconds=0.0, backoff_max_seconds=0.0)

Answer = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def problem(status: int, kind: str, detail: str = "what to do", **members: Any) -> httpx.Response:
    """An RFC 9457 answer as the API sends it."""
    body = {
        "type": f"urn:kairos:problem:{kind}",
        "title": kind.replace("-", " "),
        "status": status,
        "detail": detail,
        "instance": "urn:kairos:request:r-1",
        **members,
    }
    headers = {"content-type": "application/problem+json", "request-id": "r-1"}
    return httpx.Response(status, content=json.dumps(body).encode(), headers=headers)


def ok(body: Any, status: int = 200, **headers: str) -> httpx.Response:
    """A JSON answer."""
    return httpx.Response(status, json=body, headers=headers)


def execution_json(**changes: Any) -> dict[str, Any]:
    """An ExecutionView as the API sends it."""
    return {
        "executionId": "0b6f7c3e-8f7d-4a35-9a53-5c0d2b1f7e10",
        "jobId": 7,
        "attempt": 1,
        "manual": False,
        "triggerTime": "2026-11-30T14:00:00.000Z",
        "workerId": "w1",
        "status": "SUCCEEDED",
        "scheduledAt": None,
        "dispatchedAt": "2026-11-30T14:00:00.010Z",
        "startedAt": "2026-11-30T14:00:00.020Z",
        "endedAt": "2026-11-30T14:00:00.120Z",
        "message": None,
        "result": {"rows": 3},
        **changes,
    }


def job_json(job_id: int = 7, **changes: Any) -> dict[str, Any]:
    """A JobView as the API sends it."""
    return {
        "jobId": job_id,
        "jobName": "report",
        "jobHandler": "demo.echo",
        "params": {"day": "2026-11-30"},
        "cronExpr": None,
        "status": "WAITING",
        "nextTriggerTime": "2026-11-30T14:00:00.000Z",
        "policies": {
            "timezone": "UTC",
            "fixedRateSeconds": None,
            "misfirePolicy": "FIRE_ONCE",
            "misfireThresholdSeconds": 60,
            "catchUpWindowSeconds": 3600,
            "overlapPolicy": "FORBID",
            "maxRetries": 0,
            "retryBackoffSeconds": 10,
            "retryBackoffMaxSeconds": 3600,
            "timeoutSeconds": None,
        },
        "priority": 5,
        "callbackUrl": None,
        "clientRequestId": "k-1",
        "createdAt": "2026-11-30T13:00:00.000Z",
        "updatedAt": "2026-11-30T13:00:00.000Z",
        "lastExecution": None,
        **changes,
    }


@dataclass
class Scripted:
    """Answers requests in the order given; the last answer repeats when they run out."""

    script: Sequence[Answer]
    requests: list[httpx.Request] = field(default_factory=list)
    slept: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.answers = list(self.script)

    def _next(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return httpx.Response(
                answer.status_code, headers=answer.headers, content=answer.content
            )
        return answer(request)

    def sleep(self, seconds: float) -> None:
        """Record a wait instead of waiting."""
        self.slept.append(seconds)

    async def async_sleep(self, seconds: float) -> None:
        """Record a wait instead of waiting."""
        self.slept.append(seconds)

    def client(self, retry: RetryPolicy = NO_WAIT) -> Client:
        """A ``Client`` whose network is this script."""
        transport = httpx.MockTransport(self._next)
        return Client(BASE, KEY, retry=retry, transport=transport, sleep=self.sleep)

    def async_client(self, retry: RetryPolicy = NO_WAIT) -> AsyncClient:
        """An ``AsyncClient`` whose network is this script."""
        transport = httpx.MockTransport(self._next)
        return AsyncClient(BASE, KEY, retry=retry, transport=transport, sleep=self.async_sleep)

    def body(self, n: int = -1) -> Any:
        """The JSON body of request ``n``."""
        return json.loads(self.requests[n].content)
