"""Run logs on the worker: routing lines to the run that wrote them (across threads,
coroutines and timeouts), the size bound, and the writer that stores them in batches."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from common.states import ExecutionStatus
from services.api.run_logs import RunLogLine, RunLogPage
from services.cli.run_logs import follow_log
from services.worker.calling import call_handler
from services.worker.demo import log_lines
from services.worker.log_writer import RunLogWriter
from services.worker.registry import HandlerContext
from services.worker.run_logs import LogLine, RunLog, RunLogCapture, install_capture

handler_log = logging.getLogger("tests.handler")
EXECUTION = "0b7e5f1c-2d5a-4b1e-9a43-8c1f0f6d2a10"


@pytest.fixture
def capture() -> Iterator[RunLogCapture]:
    """The capture handler on the root logger, with INFO records let through."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    installed = install_capture(root)
    yield installed
    root.removeHandler(installed)
    root.setLevel(level)


class Stored:
    """A fake store: every batch written, in order; can be told to fail."""

    def __init__(self) -> None:
        self.batches: list[list[LogLine]] = []
        self.failures = 0
        self.lock = threading.Lock()

    def __call__(self, lines: Sequence[LogLine]) -> None:
        with self.lock:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("mysql went away")
            self.batches.append(list(lines))

    def lines_of(self, execution_id: str) -> list[str]:
        return [x.line for b in self.batches for x in b if x.execution_id == execution_id]

    @property
    def all(self) -> list[LogLine]:
        return [x for b in self.batches for x in b]


def _context(execution_id: str, run_log: RunLog | None) -> HandlerContext:
    return HandlerContext(1, execution_id, 1, 0, run_log=run_log)


def _texts(run_log: RunLog) -> list[str]:
    return [x.line for x in run_log.take()]


def test_ctx_log_and_logging_land_in_the_run_in_order(capture: RunLogCapture) -> None:
    run_log = RunLog("ex-1", 10_000)

    def handler(params: dict[str, Any], ctx: HandlerContext) -> None:
        ctx.log("first")
        handler_log.info("second %d", 2)
        ctx.log("third", logging.WARNING)

    call_handler(handler, {}, _context("ex-1", run_log), None)
    lines = run_log.take()
    assert [x.line for x in lines] == ["first", "tests.handler: second 2", "third"]
    assert [x.level for x in lines] == ["INFO", "INFO", "WARNING"]
    assert [x.seq for x in lines] == [1, 2, 3]


@pytest.mark.parametrize("timeout", [None, 30])
def test_a_coroutine_and_a_handler_thread_log_to_their_run(
    capture: RunLogCapture, timeout: int | None
) -> None:
    run_log = RunLog("ex-2", 10_000)

    async def handler(params: dict[str, Any], ctx: HandlerContext) -> None:
        await asyncio.sleep(0)
        handler_log.info("from the coroutine")

    call_handler(handler, {}, _context("ex-2", run_log), timeout)
    assert _texts(run_log) == ["tests.handler: from the coroutine"]


def test_lines_outside_a_run_go_nowhere(capture: RunLogCapture) -> None:
    run_log = RunLog("ex-3", 10_000)
    call_handler(lambda p, c: None, {}, _context("ex-3", run_log), None)
    handler_log.info("after the run")
    assert _texts(run_log) == []


def test_concurrent_runs_on_shared_threads_keep_their_own_lines(capture: RunLogCapture) -> None:
    """Many runs on a pool of 8 threads, with and without timeouts (a thread each), each
    logging 20 lines both ways: every line lands in its own run, none elsewhere."""
    runs = {f"ex-{i}": RunLog(f"ex-{i}", 100_000) for i in range(200)}

    def handler(params: dict[str, Any], ctx: HandlerContext) -> None:
        for n in range(10):
            ctx.log(f"{ctx.execution_id} ctx {n}")
            handler_log.info("%s logging %d", ctx.execution_id, n)

    def run(execution_id: str) -> None:
        timeout = 30 if int(execution_id[3:]) % 2 else None
        call_handler(handler, {}, _context(execution_id, runs[execution_id]), timeout)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(run, runs))
    for execution_id, run_log in runs.items():
        texts = _texts(run_log)
        assert len(texts) == 20
        assert all(execution_id + " " in t for t in texts), texts


def test_past_the_bound_the_first_part_is_kept_and_the_drop_is_said() -> None:
    run_log = RunLog("ex-4", 100)
    for n in range(30):
        run_log.append("INFO", f"line {n:02d}")  # 7 bytes each
    run_log.close()
    lines = run_log.take()
    kept = [x.line for x in lines[:-1]]
    assert kept[:14] == [f"line {n:02d}" for n in range(14)]
    assert sum(len(t.encode()) for t in kept) <= 100
    assert lines[-1].level == "WARNING"
    assert "log truncated" in lines[-1].line and "KAIROS_RUN_LOG_MAX_BYTES" in lines[-1].line
    assert [x.seq for x in lines] == list(range(1, len(lines) + 1))


def test_one_line_longer_than_the_bound_is_clipped_not_lost() -> None:
    run_log = RunLog("ex-5", 50)
    run_log.append("INFO", "é" * 100)
    run_log.close()
    first, note = run_log.take()
    assert len(first.line.encode()) <= 50 and first.line.startswith("éé")
    assert "log truncated" in note.line


def test_a_run_cut_by_its_apps_quota_keeps_no_more_lines_and_adds_no_note_of_its_own() -> None:
    run_log = RunLog("ex-cut", 20, app=7)
    run_log.append("INFO", "taken before the cut")
    taken = run_log.take()
    assert [x.size for x in taken] == [len(b"taken before the cut")] and run_log.app == 7
    run_log.append("INFO", "pending at the cut")
    run_log.cut()
    run_log.append("INFO", "after the cut " * 5)  # past the per-run bound too
    run_log.close()
    assert run_log.take() == [] and run_log.drained


def test_lines_after_the_run_ended_are_not_kept() -> None:
    run_log = RunLog("ex-6", 1000)
    run_log.append("INFO", "during")
    run_log.close()
    run_log.append("INFO", "after")
    assert _texts(run_log) == ["during"]


def test_a_run_that_logs_nothing_never_reaches_the_store() -> None:
    stored = Stored()
    writer = RunLogWriter(stored, 1000)
    run_log = writer.open("quiet")
    assert writer.finish(run_log, wait=0.1)
    assert writer.write_once() == 0
    assert stored.batches == []


def test_the_writer_stores_every_runs_lines_in_one_batch() -> None:
    stored = Stored()
    writer = RunLogWriter(stored, 1000)
    logs = [writer.open(f"ex-{i}") for i in range(5)]
    for run_log in logs:
        assert run_log is not None
        run_log.append("INFO", f"{run_log.execution_id} says hi")
    assert writer.write_once() == 5
    assert len(stored.batches) == 1
    assert writer.write_once() == 0


def test_finish_returns_once_the_last_lines_are_stored() -> None:
    stored = Stored()
    writer = RunLogWriter(stored, 1000, interval=30)
    writer.start()
    try:
        run_log = writer.open("ex-7")
        assert run_log is not None
        run_log.append("INFO", "one")
        assert writer.finish(run_log, wait=5)
        assert stored.lines_of("ex-7") == ["one"]
    finally:
        writer.stop()


def test_lines_mysql_refused_are_written_next_time_once_and_in_order() -> None:
    stored = Stored()
    writer = RunLogWriter(stored, 1000)
    run_log = writer.open("ex-8")
    assert run_log is not None
    run_log.append("INFO", "a")
    stored.failures = 1
    assert writer.write_once() == 0
    run_log.append("INFO", "b")
    assert writer.write_once() == 2
    assert stored.lines_of("ex-8") == ["a", "b"]
    assert [x.seq for x in stored.all] == [1, 2]


def test_a_bound_of_zero_captures_nothing() -> None:
    writer = RunLogWriter(Stored(), 0)
    assert writer.open("ex-9") is None
    assert writer.finish(None)


def test_demo_log_logs_one_line_per_string(capture: RunLogCapture) -> None:
    run_log = RunLog("ex-10", 10_000)
    value = call_handler(log_lines, {"lines": ["a", "b", "c"]}, _context("ex-10", run_log), None)
    assert value == {"logged": 3}
    assert _texts(run_log) == ["a", "kairos.demo: b", "c"]


def _page(lines: list[str], after: int, ended: bool) -> RunLogPage:
    return RunLogPage(
        executionId=EXECUTION,
        status=ExecutionStatus.SUCCEEDED if ended else ExecutionStatus.QUEUED,
        lines=[
            RunLogLine(seq=after + n + 1, at="2026-12-01T10:00:00.000Z", level="INFO", line=t)
            for n, t in enumerate(lines)
        ],
        nextAfter=after + len(lines),
        ended=ended,
    )


def test_the_cli_follows_until_the_run_ended_and_no_line_is_left(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pages = [_page(["a"], 0, False), _page([], 1, False), _page(["b"], 1, True), _page([], 2, True)]
    asked: list[int] = []

    def read(after: int) -> RunLogPage:
        asked.append(after)
        return pages[len(asked) - 1]

    sleeps: list[float] = []
    assert follow_log(read, json_lines=True, sleep=sleeps.append) == 2
    out = [json.loads(line)["line"] for line in capsys.readouterr().out.splitlines()]
    assert out == ["a", "b"] and asked == [0, 1, 1, 2] and len(sleeps) == 1
