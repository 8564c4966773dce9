"""Handlers: functions (plain or ``async def``) marked with ``@handler("name")`` in
modules a worker imports.

The decorator only marks the function; the worker collects marked functions from the
modules it is told to import, so no registry lives in a global.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from common.documents import JsonObject
from common.errors import ConfigurationError
from services.worker.run_logs import RunLog, level_name

_MARK = "__kairos_handler__"

HandlerFn = Callable[[JsonObject, "HandlerContext"], object]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class HandlerContext:
    """What a handler knows of the run, so it can make its own side effects idempotent."""

    job_id: int
    execution_id: str
    attempt: int
    trigger_time: int
    # The W3C traceparent of the run (the run's span when spans are sent), to pass to the
    # handler's own calls; None when the job was not submitted with one.
    trace: str | None = None
    run_log: RunLog | None = field(default=None, repr=False, compare=False)

    def log(self, message: object, level: int | str = "INFO") -> None:
        """Add a line to this run's log (``GET /openapi/executions/{id}/logs``), from any
        thread; the same log that standard ``logging`` calls in the handler write to."""
        if self.run_log is not None:
            self.run_log.append(level_name(level), str(message))


def handler(name: str) -> Callable[[F], F]:
    """Mark a function ``fn(params, ctx)`` as the handler registered under ``name``."""

    def mark(fn: F) -> F:
        setattr(fn, _MARK, name)
        return fn

    return mark


def collect_handlers(module_names: Iterable[str]) -> dict[str, HandlerFn]:
    """Import each module and return its marked functions by handler name."""
    found: dict[str, HandlerFn] = {}
    for module_name in module_names:
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            # Any failure while loading a handler module is a start-up configuration
            # problem; say which module, whatever the module itself raised.
            raise ConfigurationError(
                f"cannot import handler module {module_name!r}: {type(e).__name__}: {e}; "
                "check --handlers and the module's own imports"
            ) from e
        for value in vars(module).values():
            name = getattr(value, _MARK, None)
            if isinstance(name, str) and callable(value):
                if name in found and found[name] is not value:
                    raise ConfigurationError(f"handler {name!r} is registered twice")
                found[name] = _runnable(name, value)
    return found


def _runnable(name: str, fn: HandlerFn) -> HandlerFn:
    """The handler, unless calling it would not run its body (a generator function)."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigurationError(
            f"handler {name!r} ({fn.__module__}.{fn.__qualname__}) is a generator function: "
            "calling it would not run its body; return a value instead of yielding"
        )
    return fn
