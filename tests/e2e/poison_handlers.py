"""Handlers that misbehave in every way a handler can, for the poison suite.

Registered with ``--handlers tests.e2e.poison_handlers``: each returns or raises what a
careless or hostile handler might, so the suite can show that only its own run suffers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from services.worker.registry import HandlerContext, handler


@handler("poison.deep")
def deep(params: dict[str, Any], ctx: HandlerContext) -> Any:
    """A result nested far deeper than any JSON reader goes."""
    value: Any = "leaf"
    for _ in range(int(params.get("levels", 5_000))):
        value = [value]
    return value


@handler("poison.huge")
def huge(params: dict[str, Any], ctx: HandlerContext) -> str:
    """A result of several MiB."""
    return "x" * int(params.get("bytes", 5 * 1024 * 1024))


@handler("poison.surrogates")
def surrogates(params: dict[str, Any], ctx: HandlerContext) -> dict[str, str]:
    """A result holding lone surrogates, in a value and in a key."""
    return {"value": "a\ud800b", "\udfffkey": "c"}


@handler("poison.async")
async def run_async(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """A coroutine handler that waits, then returns."""
    await asyncio.sleep(float(params.get("seconds", 0.05)))
    return {"async": True}


class UnprintableError(Exception):
    """An exception whose text cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ refuses")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ refuses")


@handler("poison.unprintable_error")
def unprintable_error(params: dict[str, Any], ctx: HandlerContext) -> None:
    """Raise an exception whose ``str()`` and ``repr()`` raise."""
    raise UnprintableError()


@handler("poison.overrun")
def overrun(params: dict[str, Any], ctx: HandlerContext) -> dict[str, float]:
    """A plain function that sleeps past its job's timeout (it cannot be stopped)."""
    seconds = float(params.get("seconds", 10))
    time.sleep(seconds)
    return {"slept": seconds}


@handler("poison.async_overrun")
async def async_overrun(params: dict[str, Any], ctx: HandlerContext) -> None:
    """A coroutine that waits past its job's timeout (it is cancelled)."""
    await asyncio.sleep(float(params.get("seconds", 60)))


class Unprintable:
    """An object no text can be made of."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ refuses")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ refuses")


@handler("poison.unprintable_result")
def unprintable_result(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """A result holding an object whose ``str()`` and ``repr()`` raise."""
    return {"value": Unprintable()}


@handler("poison.system_exit")
def system_exit(params: dict[str, Any], ctx: HandlerContext) -> None:
    """Raise SystemExit, as a handler calling ``sys.exit`` would."""
    raise SystemExit(3)


@handler("poison.blocking_coroutine")
async def blocking_coroutine(params: dict[str, Any], ctx: HandlerContext) -> None:
    """A coroutine that blocks its event loop past its timeout (cancelling cannot reach it)."""
    time.sleep(float(params.get("seconds", 4)))
