"""Calling a handler: a plain function or a coroutine, within its job's timeout."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from common.documents import JsonObject
from services.worker.registry import HandlerContext, HandlerFn
from services.worker.run_logs import bind_run_log, release_run_log

if TYPE_CHECKING:
    from services.worker.overruns import Overruns

log = logging.getLogger(__name__)

CANCEL_GRACE_SECONDS = 1.0
"""How long a cancelled coroutine is waited for before the worker reports its timeout."""


class HandlerTimeoutError(Exception):
    """A handler ran past its job's timeout."""


class HandlerReturnError(Exception):
    """A handler returned what shows its work never ran (a generator nobody iterates)."""


def call_handler(
    fn: HandlerFn,
    params: JsonObject,
    context: HandlerContext,
    timeout: int | None,
    overruns: Overruns | None = None,
) -> object:
    """Call the handler and return its value.

    A coroutine (an ``async def`` handler, or any awaitable a handler returns) runs to
    completion on an event loop of its own. With a timeout the handler runs in a thread
    of its own, and once the time is up the caller stops waiting and raises
    ``HandlerTimeoutError``: a coroutine is cancelled; a plain function cannot be stopped
    (Python cannot kill a thread) and runs on. A run still going then is held in
    ``overruns`` until its thread ends, so it keeps counting against the worker's slots.
    """
    call = HandlerCall(fn, params, context)
    if timeout is None:
        return call.run_here()
    call.start()
    if call.wait(timeout):
        return call.value()
    extra = {"job_id": context.job_id, "execution_id": context.execution_id}
    cancelled = call.cancel()
    if cancelled and call.wait(CANCEL_GRACE_SECONDS):
        log.warning("handler passed its %d s timeout; cancelled", timeout, extra=extra)
        raise HandlerTimeoutError(f"timed out after {timeout} s; the coroutine was cancelled")
    if overruns is not None and not overruns.hold(call):
        raise HandlerTimeoutError(f"timed out after {timeout} s")  # it ended just now
    log.warning("handler passed its %d s timeout and runs on", timeout, extra=extra)
    if cancelled:
        raise HandlerTimeoutError(
            f"timed out after {timeout} s; the coroutine was cancelled but has not ended: "
            "it holds a worker slot until it does"
        )
    raise HandlerTimeoutError(
        f"timed out after {timeout} s; the handler cannot be stopped and runs on, "
        "holding a worker slot until it returns"
    )


class HandlerCall:
    """One call of a handler, here or in a thread of its own that can be cancelled."""

    def __init__(self, fn: HandlerFn, params: JsonObject, context: HandlerContext) -> None:
        self.fn = fn
        self.params = params
        self.context = context
        self._lock = threading.Lock()
        # Made by ``start``: a run called here (no timeout, most runs) needs no event.
        self._ended: threading.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None
        self._cancelled = False
        self._value: object = None
        self._error: BaseException | None = None
        self._finished = False
        self._on_end: Callable[[HandlerCall], object] | None = None
        self.started = time.monotonic()

    def run_here(self) -> object:
        """Call the handler in this thread and return its value, awaited if need be.

        What it logs goes to its run's log: the run is bound here, in the thread that
        runs it (a new thread starts with an empty context), and the event loop of a
        coroutine copies it into its tasks."""
        token = bind_run_log(self.context.run_log)
        try:
            value = self.fn(self.params, self.context)
            if inspect.isawaitable(value):
                return self._run_to_completion(value)
        finally:
            release_run_log(token)
        if inspect.isgenerator(value) or inspect.isasyncgen(value):
            raise HandlerReturnError(
                f"the handler returned a {type(value).__name__}, so its body never ran; "
                "return a value instead of yielding"
            )
        return value

    def start(self) -> None:
        """Run the handler in a daemon thread of its own."""
        self.started = time.monotonic()
        self._ended = threading.Event()
        name = f"handler-{self.context.execution_id}"
        threading.Thread(target=self._run_in_thread, name=name, daemon=True).start()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the thread's run to end (after ``start``);
        True if it did."""
        assert self._ended is not None, "wait() is for a run started in its own thread"
        return self._ended.wait(timeout)

    def value(self) -> object:
        """The value of the ended run; raises what the handler raised."""
        if self._error is not None:
            raise self._error
        return self._value

    def hold_if_running(self, on_end: Callable[[HandlerCall], object]) -> bool:
        """Have ``on_end(self)`` called when the thread's run ends; False if it has ended."""
        with self._lock:
            if self._finished:
                return False
            self._on_end = on_end
            return True

    def cancel(self) -> bool:
        """Cancel the coroutine the handler runs; False when it runs no coroutine yet."""
        with self._lock:
            self._cancelled = True
            loop, task = self._loop, self._task
        if loop is None or task is None:
            return False
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:
            pass  # the loop is closed: the coroutine ended meanwhile
        return True

    def _run_in_thread(self) -> None:
        try:
            self._value = self.run_here()
        except BaseException as e:  # handed to the waiting caller, whatever it is
            self._error = e
        finally:
            with self._lock:
                self._finished = True
                on_end = self._on_end
            assert self._ended is not None  # made by ``start``, which runs this
            self._ended.set()
            if on_end is not None:
                on_end(self)

    def _run_to_completion(self, awaitable: Awaitable[object]) -> object:
        async def main() -> object:
            task = asyncio.current_task()
            with self._lock:
                self._loop, self._task = asyncio.get_running_loop(), task
                cancelled = self._cancelled
            if cancelled and task is not None:
                task.cancel()
            return await awaitable

        with asyncio.Runner() as runner:
            return runner.run(main())
