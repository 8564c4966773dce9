"""Demo handlers for first looks, tests and benchmarks.

A worker registers them only when told to (``--handlers services.worker.demo``, which
``kairos up --demo`` passes): on a shared cluster they would let any app hold run slots.
"""

from __future__ import annotations

import logging
import math
import time

from common.documents import JsonObject
from services.worker.registry import HandlerContext, handler


class DemoFailure(Exception):
    """Raised on purpose by ``demo.fail``."""


@handler("demo.noop")
def noop(params: JsonObject, ctx: HandlerContext) -> None:
    """Do nothing; measures the scheduler's own cost."""


@handler("demo.echo")
def echo(params: JsonObject, ctx: HandlerContext) -> JsonObject:
    """Return the params unchanged."""
    return params


MAX_SLEEP_SECONDS = 60.0


@handler("demo.sleep")
def sleep(params: JsonObject, ctx: HandlerContext) -> dict[str, float]:
    """Sleep ``params["seconds"]`` seconds (1 by default, at most ``MAX_SLEEP_SECONDS``)."""
    asked = params.get("seconds", 1.0)
    if isinstance(asked, bool) or not isinstance(asked, int | float):
        raise DemoFailure(_sleep_refusal(asked))
    seconds = float(asked)
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SLEEP_SECONDS):
        raise DemoFailure(_sleep_refusal(asked))
    time.sleep(seconds)
    return {"slept": seconds}


def _sleep_refusal(asked: object) -> str:
    return (
        f"demo.sleep sleeps between 0 and {MAX_SLEEP_SECONDS:g} seconds; "
        f"params.seconds was {asked!r}"
    )


@handler("demo.fail")
def fail(params: JsonObject, ctx: HandlerContext) -> None:
    """Raise with ``params["message"]``."""
    raise DemoFailure(str(params.get("message", "demo.fail was asked to fail")))


demo_log = logging.getLogger("kairos.demo")


@handler("demo.log")
def log_lines(params: JsonObject, ctx: HandlerContext) -> dict[str, int]:
    """Log each string of ``params["lines"]`` as one line of the run's log, alternately
    through ``ctx.log`` and standard ``logging``; ``params["seconds"]`` (0 by default, at
    most ``MAX_SLEEP_SECONDS``) spreads them over that long, to watch a run being followed."""
    lines = params.get("lines", [])
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise DemoFailure(f"demo.log logs a list of strings; params.lines was {lines!r}")
    pause = _log_pause(params.get("seconds", 0), len(lines))
    for i, line in enumerate(lines):
        if i % 2:
            demo_log.info("%s", line)
        else:
            ctx.log(line)
        if pause:
            time.sleep(pause)
    return {"logged": len(lines)}


def _log_pause(asked: object, count: int) -> float:
    if isinstance(asked, bool) or not isinstance(asked, int | float):
        raise DemoFailure(_sleep_refusal(asked))
    if not (math.isfinite(asked) and 0 <= asked <= MAX_SLEEP_SECONDS):
        raise DemoFailure(_sleep_refusal(asked))
    return float(asked) / count if count else 0.0
