"""Calling handlers: plain functions and coroutines, with and without a timeout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from services.worker.calling import (
    HandlerCall,
    HandlerReturnError,
    HandlerTimeoutError,
    call_handler,
)
from services.worker.overruns import Overruns
from services.worker.registry import HandlerContext

CONTEXT = HandlerContext(job_id=1, execution_id="ex-1", attempt=1, trigger_time=0)


def add(params: dict[str, Any], ctx: HandlerContext) -> int:
    return int(params["a"]) + int(params["b"])


async def add_later(params: dict[str, Any], ctx: HandlerContext) -> int:
    await asyncio.sleep(0)
    return add(params, ctx)


class ReturnsGenerator:
    """A callable object whose call hands back a generator instead of doing its work."""

    def __call__(self, params: dict[str, Any], ctx: HandlerContext) -> Iterator[int]:
        return iter(x for x in [1])


@pytest.mark.parametrize("fn", [add, add_later])
@pytest.mark.parametrize("timeout", [None, 30])
def test_plain_and_coroutine_handlers_return_their_value(fn: Any, timeout: int | None) -> None:
    assert call_handler(fn, {"a": 1, "b": 2}, CONTEXT, timeout) == 3


@pytest.mark.parametrize("timeout", [None, 30])
def test_a_handler_that_returns_a_generator_did_no_work_and_is_refused(
    timeout: int | None,
) -> None:
    with pytest.raises(HandlerReturnError, match="body never ran"):
        call_handler(ReturnsGenerator(), {}, CONTEXT, timeout)


def test_a_coroutine_runs_on_a_loop_of_its_own_that_is_closed_after() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def keep_loop(params: dict[str, Any], ctx: HandlerContext) -> None:
        loops.append(asyncio.get_running_loop())

    call_handler(keep_loop, {}, CONTEXT, None)
    assert loops[0].is_closed()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # none left running in this thread


def test_a_coroutine_that_ignores_its_cancellation_holds_its_slot_until_it_ends() -> None:
    release = threading.Event()
    ended = threading.Event()

    async def stubborn(params: dict[str, Any], ctx: HandlerContext) -> None:
        try:
            while not release.is_set():
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    pass  # swallowed: the handler will not stop
        finally:
            ended.set()

    overruns = Overruns()
    freed = threading.Event()
    overruns.on_release(freed.set)
    with pytest.raises(HandlerTimeoutError, match="cancelled but has not ended"):
        call_handler(stubborn, {}, CONTEXT, 1, overruns)
    assert not ended.is_set()
    assert overruns.count == 1
    release.set()
    assert freed.wait(30) and ended.is_set()
    assert overruns.count == 0


def test_a_plain_function_past_its_timeout_runs_on_holding_its_slot() -> None:
    release = threading.Event()

    def blocking(params: dict[str, Any], ctx: HandlerContext) -> None:
        release.wait(60)

    overruns = Overruns()
    freed = threading.Event()
    overruns.on_release(freed.set)
    with pytest.raises(HandlerTimeoutError, match="cannot be stopped and runs on, holding"):
        call_handler(blocking, {}, CONTEXT, 1, overruns)
    assert overruns.count == 1
    release.set()
    assert freed.wait(30)
    assert overruns.count == 0


def test_a_run_that_ended_is_not_held() -> None:
    call = HandlerCall(add, {"a": 1, "b": 1}, CONTEXT)
    call.start()
    assert call.wait(30)
    overruns = Overruns()
    assert not overruns.hold(call)
    assert overruns.count == 0
