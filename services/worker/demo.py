"""Built-in handlers for demos, tests and benchmarks; every worker registers them."""

from __future__ import annotations

import time
from typing import Any

from services.worker.registry import HandlerContext, handler


class DemoFailure(Exception):
    """Raised on purpose by ``demo.fail``."""


@handler("demo.noop")
def noop(params: dict[str, Any], ctx: HandlerContext) -> None:
    """Do nothing; measures the scheduler's own cost."""


@handler("demo.echo")
def echo(params: dict[str, Any], ctx: HandlerContext) -> dict[str, Any]:
    """Return the params unchanged."""
    return params


@handler("demo.sleep")
def sleep(params: dict[str, Any], ctx: HandlerContext) -> dict[str, float]:
    """Sleep ``params["seconds"]`` seconds."""
    seconds = float(params.get("seconds", 1.0))
    time.sleep(seconds)
    return {"slept": seconds}


@handler("demo.fail")
def fail(params: dict[str, Any], ctx: HandlerContext) -> None:
    """Raise with ``params["message"]``."""
    raise DemoFailure(str(params.get("message", "demo.fail was asked to fail")))
