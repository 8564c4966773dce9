"""Reading a run's log: one page, every line, and following a running run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from kairos_client import RunLogLine
from scripted import Scripted, ok

EXECUTION = "0b7e5f1c-2d5a-4b1e-9a43-8c1f0f6d2a10"


def page(lines: list[str], after: int, ended: bool, status: str = "SUCCEEDED") -> dict[str, Any]:
    body = [
        {"seq": after + n + 1, "at": "2026-12-01T10:00:00.000Z", "level": "INFO", "line": text}
        for n, text in enumerate(lines)
    ]
    return {
        "executionId": EXECUTION,
        "status": status,
        "lines": body,
        "nextAfter": after + len(lines),
        "ended": ended,
    }


def test_one_page_is_asked_by_seq_and_read() -> None:
    api = Scripted([ok(page(["a", "b"], 5, True))])
    with api.client() as kairos:
        found = kairos.execution_logs(EXECUTION, after=5, limit=2)
    request = api.requests[0]
    assert request.url.path == f"/openapi/executions/{EXECUTION}/logs"
    assert parse_qsl(request.url.query.decode()) == [("after", "5"), ("limit", "2")]
    assert found.next_after == 7 and found.ended and found.status == "SUCCEEDED"
    assert found.lines[0] == RunLogLine(6, datetime(2026, 12, 1, 10, tzinfo=UTC), "INFO", "a")


def test_every_line_is_read_page_by_page_without_following() -> None:
    api = Scripted([ok(page(["a", "b"], 0, False)), ok(page([], 2, False, "QUEUED"))])
    with api.client() as kairos:
        lines = [x.line for x in kairos.iter_execution_logs(EXECUTION)]
    assert lines == ["a", "b"]
    assert len(api.requests) == 2


def test_following_polls_until_the_run_ended_and_nothing_is_left() -> None:
    api = Scripted(
        [
            ok(page(["a"], 0, False, "QUEUED")),
            ok(page([], 1, False, "QUEUED")),
            ok(page(["b"], 1, True)),
            ok(page([], 2, True)),
        ]
    )
    with api.client() as kairos:
        lines = [x.line for x in kairos.iter_execution_logs(EXECUTION, follow=True)]
    assert lines == ["a", "b"]
    afters = [dict(parse_qsl(r.url.query.decode()))["after"] for r in api.requests]
    assert afters == ["0", "1", "1", "2"]


def test_the_async_client_follows_alike() -> None:
    api = Scripted([ok(page(["a"], 0, False, "QUEUED")), ok(page([], 1, True))])

    async def main() -> list[str]:
        async with api.async_client() as kairos:
            return [x.line async for x in kairos.iter_execution_logs(EXECUTION, follow=True)]

    assert asyncio.run(main()) == ["a"]
